"""The daemon's TOML config: Kafka property names, Kafka's defaults, errors naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemon import config
from daemon.config import ConfigError

REPO = Path(__file__).resolve().parents[1]


def load_text(tmp_path: Path, text: str) -> config.Config:
    path = tmp_path / "logkeeper.toml"
    path.write_text(text)
    return config.load(path)


def test_embedded_defaults_are_three_dirs_under_data_standalone_on_9092() -> None:
    cfg = config.load(None)
    assert cfg.log_dirs == ("./data/disk0", "./data/disk1", "./data/disk2")
    assert cfg.standalone
    assert (cfg.listener.host, cfg.listener.port) == ("127.0.0.1", 9092)
    # Kafka's own defaults
    assert cfg["log.segment.bytes"] == 1073741824
    assert cfg["log.retention.ms"] == 604800000
    assert cfg["log.retention.check.interval.ms"] == 300000
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["socket.request.max.bytes"] == 104857600
    assert cfg["num.partitions"] == 1
    assert cfg["auto.create.topics.enable"] is True
    # keys the log-dir health work reads
    assert cfg["log.dir.reserve.bytes"] == 41943040
    assert cfg["log.dir.resume.free.bytes"] == 2 * 41943040
    assert cfg["log.dir.probe.interval.ms"] == 1000
    assert cfg["log.dir.probe.timeout.ms"] == 5000
    assert cfg["log.dir.slow.action"] == "report"


def test_dotted_quoted_and_table_forms_name_the_same_keys(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, """
broker.id = 7
"message.max.bytes" = 2000000
log.dirs = ["/srv/a", "/srv/b"]
listeners = "PLAINTEXT://0.0.0.0:19092"
advertised.listeners = "PLAINTEXT://broker7.example:19092"
[log.retention]
ms = 1000
bytes = 5000
""")
    assert cfg.broker_id == 7
    assert cfg["message.max.bytes"] == 2000000
    assert cfg.log_dirs == ("/srv/a", "/srv/b")
    assert cfg["log.retention.ms"] == 1000 and cfg["log.retention.bytes"] == 5000
    assert (cfg.listener.host, cfg.listener.port) == ("0.0.0.0", 19092)
    adv = cfg.advertised_listener
    assert (adv.host, adv.port) == ("broker7.example", 19092)
    lc = cfg.log_config()
    assert (lc.retention_ms, lc.retention_bytes, lc.max_message_bytes) == (1000, 5000, 2000000)


def test_kafka_style_comma_separated_log_dirs(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, 'log.dirs = "/d1, /d2,/d3"\n')
    assert cfg.log_dirs == ("/d1", "/d2", "/d3")


def test_resume_mark_follows_the_reserve_unless_given(tmp_path: Path) -> None:
    assert load_text(tmp_path, "log.dir.reserve.bytes = 1000\n")[
        "log.dir.resume.free.bytes"] == 2000
    assert load_text(tmp_path, "log.dir.reserve.bytes = 1000\nlog.dir.resume.free.bytes = 5\n"
                     )["log.dir.resume.free.bytes"] == 5


@pytest.mark.parametrize("text, names", [
    ("brokers.id = 1\n", ["brokers.id", "broker.id"]),  # typo: suggests the real key
    ("foo = 1\n", ["foo"]),
    ("broker.id = \"one\"\n", ["broker.id", "integer"]),
    ("broker.id = -2\n", ["broker.id", ">= -1"]),
    ("log.segment.bytes = 10\n", ["log.segment.bytes", ">= 14"]),
    ("log.retention.ms = -5\n", ["log.retention.ms"]),
    ("num.partitions = 0\n", ["num.partitions"]),
    ("auto.create.topics.enable = \"maybe\"\n", ["auto.create.topics.enable"]),
    ("listeners = \"SSL://h:9093\"\n",
     ["listener SSL (SSL)", "ssl.keystore.location", "key and certificate"]),
    ("listeners = \"SASL_SSL://h:9093\"\n", ["listener SASL_SSL (SASL_SSL)", "ssl.keystore"]),
    ("listeners = \"PLAINTEXT://h:99999\"\n", ["listeners", "65535"]),
    ("listeners = \"PLAINTEXT://a:1,PLAINTEXT://b:2\"\n", ["listeners", "once"]),
    ("listeners = \"PLAINTEXT://a:1,CLIENT://b:2\"\n",
     ["listeners", "no security protocol is defined for listener CLIENT", "CLIENT:PLAINTEXT"]),
    ("listeners = \"CLIENT://b:2\"\n", ["listeners", "listener CLIENT"]),
    ("listeners = \"SASL_PLAINTEXT://h:9093,PLAINTEXT://h:9092\"\n",
     ["sasl.enabled.mechanisms", "GSSAPI is not served", "PLAIN, SCRAM-SHA-256"]),
    ("listeners = \"A://h:1,B://h:1\"\n"
     "\"listener.security.protocol.map\" = \"A:PLAINTEXT,B:PLAINTEXT\"\n",
     ["listeners", "a different port"]),
    ("listeners = \"A://h:1,B://h:2\"\n"
     "\"listener.security.protocol.map\" = \"A:PLAINTEXT,B:PLAINTEXT\"\n",
     ["no advertised listener is named PLAINTEXT", "inter.broker.listener.name", "A, B"]),
    ("listeners = \"A://h:1,B://h:2\"\n"
     "\"listener.security.protocol.map\" = \"A:PLAINTEXT,B:PLAINTEXT\"\n"
     "\"inter.broker.listener.name\" = \"C\"\n",
     ["inter.broker.listener.name = C", "one of A, B"]),
    ("listeners = \"A://h:1,B://h:2\"\n"
     "\"listener.security.protocol.map\" = \"A:PLAINTEXT,B:PLAINTEXT,C:PLAINTEXT\"\n"
     "\"inter.broker.listener.name\" = \"B\"\n"
     "\"advertised.listeners\" = \"B://x:2,C://x:3\"\n",
     ["advertised.listeners", "names C, which listeners does not define"]),
    ("\"inter.broker.listener.name\" = \"PLAINTEXT\"\n"
     "\"security.inter.broker.protocol\" = \"PLAINTEXT\"\n",
     ["only one of inter.broker.listener.name and security.inter.broker.protocol"]),
    ("\"security.inter.broker.protocol\" = \"SASL_GSS\"\n",
     ["security.inter.broker.protocol", "expected one of PLAINTEXT, SSL"]),
    ("\"ssl.client.auth\" = \"always\"\n", ["ssl.client.auth", "none, requested, required"]),
    ("\"authorizer.class.name\" = \"com.example.LdapAuthorizer\"\n",
     ["authorizer.class.name", "kafka.security.authorizer.AclAuthorizer",
      "cannot load com.example.LdapAuthorizer"]),
    ("\"super.users\" = \"User:admin;alice\"\n",
     ["super.users", "Invalid principal 'alice'", "Type:name"]),
    ("\"ssl.principal.mapping.rules\" = \"RULE:^CN=(.*?)/$1/X/Y\"\n",
     ["ssl.principal.mapping.rules", "Invalid rule"]),
    ("\"ssl.keystore.type\" = \"BKS\"\n", ["ssl.keystore.type", "JKS, PKCS12, PEM"]),
    ("\"ssl.enabled.protocols\" = \"TLSv9\"\n", ["ssl.enabled.protocols", "TLSv9"]),
    ("\"ssl.endpoint.identification.algorithm\" = \"ldap\"\n",
     ["ssl.endpoint.identification.algorithm", "https or nothing"]),
    ("\"listener.name.ssl.ssl.client.auth\" = \"always\"\n",
     ["listener.name.ssl.ssl.client.auth", "none, requested, required"]),
    ("\"listener.security.protocol.map\" = \"PLAINTEXT:TLS\"\n",
     ["listener.security.protocol.map", "TLS is not a security protocol"]),
    ("node.id = 2\nbroker.id = 1\n", ["broker.id", "node.id", "equal"]),
    ("process.roles = \"controller\"\n", ["process.roles", "controller-only"]),
    ("process.roles = \"broker,controller\"\n"
     "controller.quorum.voters = \"1@h1:9093,2@h2:9093\"\n",
     ["process.roles", "quorum of 2", "zookeeper.connect"]),
    ("process.roles = \"broker,controller\"\ncontroller.listener.names = \"CONTROLLER\"\n"
     "listeners = \"PLAINTEXT://a:1,CONTROLLER://a:2,OTHER://a:3\"\n",
     ["listeners", "for listener OTHER"]),
    ("process.roles = \"broker,controller\"\ncontroller.listener.names = \"CONTROLLER\"\n"
     "listeners = \"CONTROLLER://a:2\"\n",
     ["listeners", "no listener besides the controller listeners (CONTROLLER)"]),
    ("http.listen = \"9308\"\n", ["http.listen", "host:port"]),
    ("log.dirs = []\n", ["log.dirs"]),
    ("log.dirs = [\"/a\", \"/a\"]\n", ["log.dirs", "twice"]),
    ("log.dirs = [\"/a\", \"/a/b\"]\n", ["log.dirs", "nest"]),
    ("zookeeper.connect = \"no port\"\n", ["zookeeper.connect"]),
    ("log.dir.slow.action = \"panic\"\n", ["log.dir.slow.action", "report"]),
    ("message.max.bytes = 2000000\nsocket.request.max.bytes = 1000000\n",
     ["socket.request.max.bytes", "message.max.bytes"]),
    ("broker.id = 1\n\"broker.id\" = 2\n", ["broker.id", "twice"]),
    ("broker.id = [\n", ["TOML"]),
])
def test_bad_config_names_the_key(tmp_path: Path, text: str, names: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, text)
    message = str(info.value)
    assert str(tmp_path / "logkeeper.toml") in message
    for name in names:
        assert name in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(tmp_path / "absent.toml")


def test_example_config_for_etc_is_valid() -> None:
    cfg = config.load(REPO / "systemd" / "logkeeper.toml")
    assert cfg.log_dirs == ("/data/disk0", "/data/disk1", "/data/disk2")
    assert cfg.standalone


def test_example_config_lists_every_known_key() -> None:
    text = (REPO / "systemd" / "logkeeper.toml").read_text()
    for key in config.KEYS:
        assert key in text, f"systemd/logkeeper.toml does not mention {key}"


def test_serve_refuses_a_bad_config_before_touching_anything(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(f'log.dirs = ["{tmp_path / "d0"}"]\nlog.segmnt.bytes = 100\n')
    proc = subprocess.run([sys.executable, "-m", "daemon.cli", "serve", "--config", str(bad)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "log.segmnt.bytes" in proc.stderr and "log.segment.bytes" in proc.stderr
    assert not (tmp_path / "d0").exists()


def test_serve_help_config_lists_keys() -> None:
    proc = subprocess.run([sys.executable, "-m", "daemon.cli", "serve", "--help-config"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for key in ("log.dirs", "http.listen", "log.dir.slow.action"):
        assert key in proc.stdout


# ---- every key, through the one Config API the daemon reads ----


def test_embedded_defaults() -> None:
    cfg = config.load(None)
    assert cfg.broker_id == 0 and cfg["zookeeper.connect"] is None and cfg.standalone
    assert cfg["node.id"] == 0  # Kafka names the broker id by both keys
    assert cfg.log_dirs == ("./data/disk0", "./data/disk1", "./data/disk2")
    assert (cfg.listener.host, cfg.listener.port) == ("127.0.0.1", 9092)
    assert cfg.http_listen == ("127.0.0.1", 9308)
    assert cfg["log.retention.check.interval.ms"] == 300000
    assert cfg["message.max.bytes"] == 1048588 and cfg["socket.request.max.bytes"] == 104857600
    assert cfg["log.dir.reserve.bytes"] == 41943040
    assert cfg["log.dir.resume.free.bytes"] == 2 * 41943040
    assert cfg["log.dir.min.free.bytes"] == 0
    assert (cfg["log.dir.probe.interval.ms"], cfg["log.dir.probe.timeout.ms"]) == (1000, 5000)
    assert cfg["log.dir.slow.action"] == "report"


EVERY_KEY = """
broker.id = 42
"broker.id.generation.enable" = true
reserved.broker.max.id = 1000
broker.rack = "r7"
node.id = 42
process.roles = "broker,controller"
controller.listener.names = "CONTROLLER"
log.dirs = "/srv/k/a,/srv/k/b"
listeners = "PLAINTEXT://[::1]:19093,CONTROLLER://[::1]:19094"
advertised.listeners = "PLAINTEXT://[::1]:29093"
listener.security.protocol.map = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
inter.broker.listener.name = "PLAINTEXT"
ssl.keystore.type = "pkcs12"
ssl.keystore.location = "/etc/kafka/broker.p12"
ssl.keystore.password = "ks-secret"
ssl.key.password = "key-secret"
ssl.keystore.key = "-----BEGIN PRIVATE KEY-----"
ssl.keystore.certificate.chain = "-----BEGIN CERTIFICATE-----"
ssl.truststore.type = "PEM"
ssl.truststore.location = "/etc/kafka/ca.pem"
ssl.truststore.password = "ts-secret"
ssl.truststore.certificates = "-----BEGIN CERTIFICATE-----"
ssl.client.auth = "required"
ssl.enabled.protocols = "TLSv1.3"
ssl.protocol = "TLS"
ssl.endpoint.identification.algorithm = ""
ssl.cipher.suites = "TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,TLS_AES_128_GCM_SHA256"
sasl.enabled.mechanisms = "PLAIN,SCRAM-SHA-512"
sasl.mechanism.inter.broker.protocol = "scram-sha-512"
authorizer.class.name = "kafka.security.authorizer.AclAuthorizer"
connections.max.reauth.ms = 3600000
ssl.allow.dn.changes = true
ssl.allow.san.changes = false
super.users = "User:admin; User:CN=broker,O=acme"
allow.everyone.if.no.acl.found = true
ssl.principal.mapping.rules = "RULE:^CN=(.*?),O=acme$/$1/L,DEFAULT"
controlled.shutdown.enable = false
controlled.shutdown.max.retries = 5
controlled.shutdown.retry.backoff.ms = 1000
zookeeper.connect = "zk1:2181,zk2:2181/logkeeper"
zookeeper.session.timeout.ms = 6000
zookeeper.ssl.client.enable = false
zookeeper.ssl.keystore.location = "/etc/logkeeper/zk-client.p12"
zookeeper.ssl.keystore.password = "zk-secret"
zookeeper.ssl.keystore.type = "PKCS12"
zookeeper.ssl.truststore.location = "/etc/logkeeper/zk-ca.pem"
zookeeper.ssl.truststore.password = "zk-trust"
zookeeper.ssl.truststore.type = "PEM"
zookeeper.ssl.protocol = "TLS"
zookeeper.ssl.enabled.protocols = "TLSv1.2,TLSv1.3"
zookeeper.ssl.cipher.suites = "TLS_AES_256_GCM_SHA384"
zookeeper.ssl.endpoint.identification.algorithm = ""
zookeeper.ssl.crl.enable = false
zookeeper.ssl.ocsp.enable = false
zookeeper.set.acl = false
log.segment.bytes = 1048576
log.roll.ms = 3600000
log.roll.hours = 5
log.roll.jitter.ms = 600000
log.roll.jitter.hours = 1
log.flush.interval.messages = 10000
log.flush.interval.ms = 1000
log.flush.scheduler.interval.ms = 2000
log.retention.ms = -1
log.retention.minutes = 30
log.retention.hours = 2
log.cleanup.policy = "delete"
log.cleaner.enable = false
log.cleaner.backoff.ms = 100
log.cleaner.dedupe.buffer.size = 1048576
log.cleaner.io.buffer.size = 65536
log.cleaner.min.cleanable.ratio = 0.3
log.cleaner.delete.retention.ms = 60000
log.cleaner.min.compaction.lag.ms = 10
log.cleaner.max.compaction.lag.ms = 600000
"log.dir" = "/srv/k/ignored"  # log.dirs wins
log.retention.bytes = 10000000
log.retention.check.interval.ms = 1000
log.index.interval.bytes = 8192
log.index.size.max.bytes = 65536
message.max.bytes = 2000000
compression.type = "zstd"
compression.zstd.level = 12
compression.gzip.level = 4
compression.lz4.level = 1
log.message.timestamp.type = "LogAppendTime"
replica.selector.class = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
log.message.timestamp.before.max.ms = 86400000
log.message.timestamp.after.max.ms = 3600000
log.message.timestamp.difference.max.ms = 604800000
num.partitions = 6
default.replication.factor = 3
auto.create.topics.enable = false
delete.topic.enable = false
socket.request.max.bytes = 3000000
fetch.max.bytes = 2000000
http.listen = "0.0.0.0:19308"
log.dir.reserve.bytes = 1000
log.dir.resume.free.bytes = 7000
log.dir.min.free.bytes = 500
log.dir.probe.interval.ms = 250
log.dir.probe.timeout.ms = 2000
log.dir.slow.action = "offline"
log.dir.slow.min.ms = 20
log.dir.slow.factor = 3
min.insync.replicas = 2
unclean.leader.election.enable = true
auto.leader.rebalance.enable = false
leader.imbalance.check.interval.seconds = 30
leader.imbalance.per.broker.percentage = 25
replica.lag.time.max.ms = 10000
replica.fetch.max.bytes = 4194304
replica.fetch.response.max.bytes = 20971520
replica.fetch.wait.max.ms = 250
replica.fetch.min.bytes = 2
replica.fetch.backoff.ms = 300
replication.quota.window.num = 5
replication.quota.window.size.seconds = 2
quota.window.num = 4
quota.window.size.seconds = 5
alter.log.dirs.replication.quota.window.num = 7
alter.log.dirs.replication.quota.window.size.seconds = 3
replica.high.watermark.checkpoint.interval.ms = 2000
offsets.topic.num.partitions = 7
offsets.topic.replication.factor = 2
offsets.topic.segment.bytes = 5000000
offsets.commit.timeout.ms = 4000
offset.metadata.max.bytes = 100
offsets.retention.minutes = 60
offsets.retention.check.interval.ms = 1000
group.initial.rebalance.delay.ms = 10
group.min.session.timeout.ms = 1000
group.max.session.timeout.ms = 60000
group.max.size = 9
transaction.state.log.num.partitions = 5
transaction.state.log.replication.factor = 2
transaction.state.log.min.isr = 1
transaction.state.log.segment.bytes = 6000000
transaction.max.timeout.ms = 120000
transactional.id.expiration.ms = 3600000
transaction.abort.timed.out.transaction.cleanup.interval.ms = 500
transaction.remove.expired.transaction.cleanup.interval.ms = 60000
producer.id.expiration.ms = 7200000
producer.id.expiration.check.interval.ms = 30000
transaction.partition.verification.enable = false
"""


def test_inter_broker_listener(tmp_path: Path) -> None:
    cfg = load_props(tmp_path, "listeners=PLAINTEXT://:9092,EXTERNAL://:9094\n"
                               "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,"
                               "EXTERNAL:PLAINTEXT\nsecurity.inter.broker.protocol=PLAINTEXT\n")
    assert cfg.inter_broker_listener == "PLAINTEXT"
    assert [lst.name for lst in cfg.listeners] == ["PLAINTEXT", "EXTERNAL"]
    cfg = load_props(tmp_path, "listeners=INSIDE://:9092,OUTSIDE://:9094\n"
                               "advertised.listeners=INSIDE://kafka:9092,OUTSIDE://localhost:29094\n"
                               "listener.security.protocol.map=INSIDE:PLAINTEXT,OUTSIDE:PLAINTEXT\n"
                               "inter.broker.listener.name=INSIDE\n")
    assert cfg.inter_broker_listener == "INSIDE"
    assert (cfg.advertised_listener.host, cfg.advertised_listener.port) == ("kafka", 9092)
    assert [(a.name, a.host, a.port) for a in cfg.advertised_listeners] == [
        ("INSIDE", "kafka", 9092), ("OUTSIDE", "localhost", 29094)]
    # One listener of another name is the inter-broker one (Kafka would ask for it).
    cfg = load_props(tmp_path, "listeners=CLIENT://:9092\n"
                               "listener.security.protocol.map=CLIENT:PLAINTEXT\n")
    assert cfg.inter_broker_listener == "CLIENT"


def test_every_key_is_read(tmp_path: Path) -> None:
    path = tmp_path / "all.toml"
    path.write_text(EVERY_KEY)
    cfg = config.load(str(path))
    # security.inter.broker.protocol is inter.broker.listener.name's older form: only
    # one of the two may be set (test_inter_broker_listener).
    assert set(config.KEYS) - {"security.inter.broker.protocol"} <= {
        line.split(" =")[0].strip('"') for line in EVERY_KEY.split("\n") if line}
    assert cfg.broker_id == 42 and cfg["broker.rack"] == "r7"
    assert (cfg["ssl.keystore.type"], cfg["ssl.client.auth"], cfg["ssl.enabled.protocols"],
            cfg["ssl.endpoint.identification.algorithm"]) == ("PKCS12", "required",
                                                              ("TLSv1.3",), "")
    assert cfg.tls == {}  # no SSL listener: nothing read
    assert cfg["sasl.enabled.mechanisms"] == ("PLAIN", "SCRAM-SHA-512")
    assert cfg["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert cfg.sasl == {} and cfg.inter_broker_login is None  # no SASL listener
    assert cfg["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert cfg["super.users"] == ("User:admin", "User:CN=broker,O=acme")
    assert cfg["allow.everyone.if.no.acl.found"] is True
    assert cfg["connections.max.reauth.ms"] == 3600000
    assert [r.apply("CN=Alice,O=acme") for r in cfg["ssl.principal.mapping.rules"]] == [
        "alice", "CN=Alice,O=acme"]
    assert cfg["replica.selector.class"] == config.RACK_AWARE_REPLICA_SELECTOR
    assert cfg["controlled.shutdown.enable"] is False and cfg["controlled.shutdown.max.retries"] == 5
    assert (cfg["zookeeper.ssl.keystore.type"], cfg["zookeeper.ssl.protocol"],
            cfg["zookeeper.ssl.enabled.protocols"],
            cfg["zookeeper.ssl.endpoint.identification.algorithm"]) == (
        "PKCS12", "TLS", ("TLSv1.2", "TLSv1.3"), "")
    assert cfg.zookeeper_tls is None  # zookeeper.ssl.client.enable is false: nothing read
    assert cfg.log_dirs == ("/srv/k/a", "/srv/k/b")
    assert (cfg.listener.host, cfg.listener.port) == ("::1", 19093)
    assert (cfg.advertised_listener.host, cfg.advertised_listener.port) == ("::1", 29093)
    assert cfg["zookeeper.connect"] == "zk1:2181,zk2:2181/logkeeper" and not cfg.standalone
    assert cfg["process.roles"] == ("broker", "controller") and cfg["node.id"] == 42
    assert any("KRaft" in w and "CONTROLLER" in w and "ZooKeeper mode" in w
               for w in cfg.warnings), cfg.warnings
    assert (cfg["num.partitions"], cfg["default.replication.factor"]) == (6, 3)
    assert cfg["auto.create.topics.enable"] is False and cfg["delete.topic.enable"] is False
    assert cfg["compression.type"] == "zstd" and cfg.log_config().compression_type == "zstd"
    assert cfg.log_config().timestamp_type == "LogAppendTime"
    lc = cfg.log_config()
    assert lc.max_index_bytes == 65536
    assert lc.segment_jitter_ms == 600000  # .ms wins over .hours
    assert (lc.flush_messages, lc.flush_ms) == (10000, 1000)
    assert (lc.timestamp_before_max_ms, lc.timestamp_after_max_ms,
            lc.timestamp_difference_max_ms) == (86400000, 3600000, 604800000)
    assert lc.timestamp_window is None  # LogAppendTime: the leader's own time, unbounded
    assert lc.replace(timestamp_type="CreateTime").timestamp_window == (86400000, 3600000)
    assert cfg.log_config().compression_level == 12
    assert (cfg["compression.gzip.level"], cfg["compression.lz4.level"]) == (4, 1)
    assert cfg.http_listen == ("0.0.0.0", 19308)
    assert (cfg["log.dir.reserve.bytes"], cfg["log.dir.resume.free.bytes"]) == (1000, 7000)
    assert cfg["log.dir.min.free.bytes"] == 500
    assert (cfg["log.dir.probe.interval.ms"], cfg["log.dir.probe.timeout.ms"]) == (250, 2000)
    assert cfg["log.dir.slow.action"] == "offline"
    assert (cfg["log.dir.slow.min.ms"], cfg["log.dir.slow.factor"]) == (20, 3)
    assert (cfg["min.insync.replicas"], cfg["replica.lag.time.max.ms"]) == (2, 10000)
    assert cfg["unclean.leader.election.enable"] is True
    assert cfg["auto.leader.rebalance.enable"] is False
    assert (cfg["leader.imbalance.check.interval.seconds"],
            cfg["leader.imbalance.per.broker.percentage"]) == (30, 25)
    assert cfg["replica.high.watermark.checkpoint.interval.ms"] == 2000
    assert (cfg["replication.quota.window.num"], cfg["replication.quota.window.size.seconds"]) == (5, 2)
    assert (cfg["quota.window.num"], cfg["quota.window.size.seconds"]) == (4, 5)
    assert (cfg["alter.log.dirs.replication.quota.window.num"],
            cfg["alter.log.dirs.replication.quota.window.size.seconds"]) == (7, 3)
    assert [cfg[f"replica.fetch.{k}"] for k in (
        "max.bytes", "response.max.bytes", "wait.max.ms", "min.bytes", "backoff.ms")] == [
        4194304, 20971520, 250, 2, 300]
    assert (cfg["log.cleaner.enable"], cfg["log.cleaner.backoff.ms"],
            cfg["log.cleaner.dedupe.buffer.size"], cfg["log.cleaner.io.buffer.size"]) == (
        False, 100, 1048576, 65536)
    assert (cfg.log_config().min_cleanable_dirty_ratio, cfg.log_config().delete_retention_ms,
            cfg.log_config().min_compaction_lag_ms, cfg.log_config().max_compaction_lag_ms) == (
        0.3, 60000, 10, 600000)
    assert [cfg[k] for k in ("offsets.topic.num.partitions", "offsets.topic.replication.factor",
                             "offsets.topic.segment.bytes", "offsets.commit.timeout.ms",
                             "offset.metadata.max.bytes", "group.initial.rebalance.delay.ms",
                             "group.min.session.timeout.ms", "group.max.session.timeout.ms",
                             "group.max.size", "offsets.retention.minutes",
                             "offsets.retention.check.interval.ms")] == [
        7, 2, 5000000, 4000, 100, 10, 1000, 60000, 9, 60, 1000]
    assert [cfg[k] for k in (
        "transaction.state.log.num.partitions", "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr", "transaction.state.log.segment.bytes",
        "transaction.max.timeout.ms", "transactional.id.expiration.ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "producer.id.expiration.ms", "producer.id.expiration.check.interval.ms",
        "transaction.partition.verification.enable")] == [
        5, 2, 1, 6000000, 120000, 3600000, 500, 60000, 7200000, 30000, False]
    assert cfg.source == str(path)
    lc = cfg.log_config()
    assert (lc.segment_bytes, lc.segment_ms, lc.retention_ms, lc.retention_bytes,
            lc.index_interval_bytes, lc.max_message_bytes) == (
        1048576, 3600000, -1, 10000000, 8192, 2000000)


def test_empty_http_listen_turns_the_endpoint_off(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('http.listen = ""\n')
    assert config.load(path).http_listen is None


def test_a_mapping_is_validated_like_a_file() -> None:
    cfg = config.from_mapping({"log.dirs": ["/t/a"], "log.dir.reserve.bytes": 10})
    assert cfg["log.dir.resume.free.bytes"] == 20
    with pytest.raises(ConfigError, match="num.partitions"):
        config.from_mapping({"num.partitions": 0})
    with pytest.raises(ConfigError, match="log.dir.slow.action"):
        config.from_mapping({"log.dir.slow.action": "panic"})
    with pytest.raises(ConfigError, match="listeners"):
        config.from_mapping({"listeners": "PLAINTEXT://127.0.0.1:70000"})
    # A resume mark at or under the floor would make a dir flap.
    with pytest.raises(ConfigError, match="log.dir.resume.free.bytes"):
        config.from_mapping({"log.dir.min.free.bytes": 100, "log.dir.resume.free.bytes": 100})


def test_load_config_errors_name_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('listeners = "PLAINTEXT://nohost"\n')
    with pytest.raises(ConfigError) as info:
        config.load(str(path))
    assert str(path) in str(info.value) and "listeners" in str(info.value)


# ---- Kafka's own format and key families (issue 9, section 3) ----


def load_props(tmp_path: Path, text: str, name: str = "server.properties") -> config.Config:
    path = tmp_path / name
    path.write_text(text)
    return config.load(path)


def test_properties_parse_as_java_properties_load_does() -> None:
    text = ("# comment\n"
            "  ! another comment \\\n"
            "a=1\n"
            "b : 2\n"
            "c 3\n"
            "d\t=\t 4  \n"  # blanks around the separator go, trailing ones stay
            "e = one,\\\n"
            "     two,\\\n"
            "\tthree\n"
            "f\\=g = h\\:i\n"  # escaped separators belong to the key and value
            "j = \\u0041\\t\\#\n"
            "k\n"  # a key alone has the empty value
            "l=first\rm=second\r\n"  # \r and \r\n end lines too
            "   \n"
            "n = # not a comment\n"
            "o = tail \\\\\n")  # an even number of backslashes does not continue
    assert config.parse_properties(text) == [
        ("a", "1", 3), ("b", "2", 4), ("c", "3", 5), ("d", "4  ", 6),
        ("e", "one,two,three", 7), ("f=g", "h:i", 10), ("j", "A\t#", 11), ("k", "", 12),
        ("l", "first", 13), ("m", "second", 14), ("n", "# not a comment", 16),
        ("o", "tail \\", 17)]


def test_a_malformed_unicode_escape_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"server.properties:2 .*Java properties.*\\uzz"):
        load_props(tmp_path, "broker.id=1\nlog.dirs=/a\\uzz\n")


def test_properties_values_convert_to_each_keys_type(tmp_path: Path) -> None:
    cfg = load_props(tmp_path, "broker.id = 3 \nauto.create.topics.enable=FALSE\n"
                               "log.dirs=/d1, /d2\nlisteners=PLAINTEXT://:9092\n"
                               "zookeeper.connect=localhost:2181/kafka\nnum.partitions=+4\n")
    assert cfg.broker_id == 3 and cfg["auto.create.topics.enable"] is False
    assert cfg.log_dirs == ("/d1", "/d2") and cfg["num.partitions"] == 4
    assert (cfg.listener.host, cfg.listener.port) == ("", 9092)
    assert cfg["zookeeper.connect"] == "localhost:2181/kafka" and not cfg.standalone


@pytest.mark.parametrize("text, names", [
    ("log.retention.hours=a week\n", ["log.retention.hours", "'a week'", "integer", ":1"]),
    ("broker.id=1\nnum.partitions=0\n", ["num.partitions", "'0'", ">= 1", ":2"]),
    ("auto.create.topics.enable=yes\n", ["auto.create.topics.enable", "'yes'", "true or false"]),
    ("listeners=SASL_PLAINTEXT://:9093\n", ["sasl.enabled.mechanisms", "GSSAPI"]),
    ("log.cleanup.policy=compress\n", ["log.cleanup.policy", "'compress'"]),
    ("advertised.listeners=PLAINTEXT://0.0.0.0:9092\n", ["advertised.listeners", "0.0.0.0"]),
    ("log.retention.hours=-2\n", ["log.retention.hours", ">= -1"]),
    ("log.roll.hours=0\n", ["log.roll.hours", ">= 1"]),
    ("compression.type=brotli\n", ["compression.type", "'brotli'", "zstd, lz4"]),
    ("log.message.timestamp.type=WallClock\n", ["log.message.timestamp.type", "'WallClock'"]),
    ("compression.gzip.level=0\n", ["compression.gzip.level", "between 1 and 9 or -1"]),
    ("replica.selector.class=com.example.Nearest\n",
     ["replica.selector.class", "'com.example.Nearest'", "RackAwareReplicaSelector"]),
])
def test_bad_properties_values_name_key_value_file_and_line(
        tmp_path: Path, text: str, names: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_props(tmp_path, text)
    message = str(info.value)
    assert str(tmp_path / "server.properties") in message and "Java properties" in message
    for name in names:
        assert name in message


def test_retention_family_takes_kafkas_precedence(tmp_path: Path) -> None:
    def retention(text: str) -> int:
        return load_props(tmp_path, text)["log.retention.ms"]

    assert retention("") == 168 * 3600 * 1000  # Kafka's default: log.retention.hours=168
    assert retention("log.retention.hours=1\n") == 3600 * 1000
    assert retention("log.retention.hours=1\nlog.retention.minutes=5\n") == 5 * 60 * 1000
    assert retention("log.retention.hours=1\nlog.retention.minutes=5\n"
                     "log.retention.ms=700\n") == 700
    assert retention("log.retention.minutes=5\nlog.retention.ms=-1\n") == -1
    assert retention("log.retention.hours=-1\n") == -1
    assert retention("log.retention.ms=100\nlog.retention.hours=-1\n") == 100
    assert load_props(tmp_path, "log.retention.hours=2\n").log_config().retention_ms == 7200000


def test_roll_family_takes_kafkas_precedence(tmp_path: Path) -> None:
    assert load_props(tmp_path, "")["log.roll.ms"] == 168 * 3600 * 1000
    assert load_props(tmp_path, "log.roll.hours=2\n")["log.roll.ms"] == 2 * 3600 * 1000
    cfg = load_props(tmp_path, "log.roll.hours=2\nlog.roll.ms=1234\n")
    assert cfg["log.roll.ms"] == 1234 and cfg.log_config().segment_ms == 1234
    assert load_props(tmp_path, "log.roll.jitter.hours=2\n").log_config().segment_jitter_ms == \
        2 * 3600 * 1000
    # log.flush.interval.ms defaults to the flush scheduler's interval, as in Kafka.
    assert load_props(tmp_path, "log.flush.scheduler.interval.ms=3000\n").log_config().flush_ms \
        == 3000


def test_the_families_resolve_in_toml_too(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, "[log.retention]\nhours = 1\nminutes = 2\n[log.roll]\nhours = 3\n")
    assert (cfg["log.retention.ms"], cfg["log.roll.ms"]) == (120000, 3 * 3600 * 1000)


def test_log_dir_is_used_only_without_log_dirs(tmp_path: Path) -> None:
    assert load_props(tmp_path, "log.dir=/k/one\n").log_dirs == ("/k/one",)
    assert load_props(tmp_path, "log.dir=/k/one\nlog.dirs=/k/a,/k/b\n").log_dirs == (
        "/k/a", "/k/b")


def test_the_cleanup_policy_says_who_deletes(tmp_path: Path) -> None:
    cfg = load_props(tmp_path, "log.cleanup.policy=compact\n")
    lc = cfg.log_config()
    assert lc.compacted and not lc.retention_deletes and cfg.warnings == ()
    for policy in ("compact,delete", "delete, compact"):
        lc = load_props(tmp_path, f"log.cleanup.policy={policy}\n").log_config()
        assert lc.compacted and lc.retention_deletes and lc.cleanup_policy == "compact,delete"
    lc = load_props(tmp_path, "log.cleanup.policy=delete\n").log_config()
    assert not lc.compacted and lc.retention_deletes
    # Compacted logs with no cleaner are neither cleaned nor deleted: say so.
    cfg = load_props(tmp_path, "log.cleanup.policy=compact\nlog.cleaner.enable=false\n")
    assert any("log.cleaner.enable" in w for w in cfg.warnings)


@pytest.mark.parametrize("broker_policy", ["delete", "compact", "compact,delete"])
def test_a_topics_cleanup_policy_sets_both_compaction_and_deletion(
        tmp_path: Path, broker_policy: str) -> None:
    """A topic's cleanup.policy decides both, whatever the broker's: 'compact,delete' on a
    topic compacted nothing (taken for 'delete'), and a 'compact' topic under a broker
    'compact,delete' kept the broker's deletion, so retention emptied it (its keys'
    latest values, __consumer_offsets' commits)."""
    from daemon.replica.topic_config import Layers, log_config, typed

    cfg = load_props(tmp_path, f"log.cleanup.policy={broker_policy}\n")
    layers = Layers(cfg, cfg.broker_id)
    for policy, (compacted, deletes) in {"compact": (True, False),
                                         "compact,delete": (True, True),
                                         "delete,compact": (True, True),
                                         "delete": (False, True)}.items():
        lc = log_config(cfg.log_config(), typed(layers, {"cleanup.policy": policy}))
        assert (lc.compacted, lc.retention_deletes) == (compacted, deletes), policy
        assert lc.cleanup_policy == ("delete" if policy == "delete" else
                                     "compact" if policy == "compact" else "compact,delete")


def test_the_cleaner_keys_reach_the_log_config(tmp_path: Path) -> None:
    cfg = load_props(tmp_path, "log.cleaner.min.cleanable.ratio=0.25\n"
                               "log.cleaner.delete.retention.ms=1000\n"
                               "log.cleaner.min.compaction.lag.ms=5\n"
                               "log.cleaner.backoff.ms=100\n")
    lc = cfg.log_config()
    assert (lc.min_cleanable_dirty_ratio, lc.delete_retention_ms, lc.min_compaction_lag_ms) == (
        0.25, 1000, 5)
    assert cfg["log.cleaner.backoff.ms"] == 100 and cfg["log.cleaner.enable"] is True
    assert load_text(tmp_path, "[log.cleaner]\nmin.cleanable.ratio = 0.75\n"
                     ).log_config().min_cleanable_dirty_ratio == 0.75
    with pytest.raises(ConfigError, match="log.cleaner.min.cleanable.ratio"):
        load_props(tmp_path, "log.cleaner.min.cleanable.ratio=1.5\n")


def test_advertised_listener_defaults_to_the_listener(tmp_path: Path) -> None:
    cfg = load_props(tmp_path, "listeners=PLAINTEXT://127.0.0.1:9093\n")
    assert cfg.advertised_listener == cfg.listener
    cfg = load_props(tmp_path, "listeners=PLAINTEXT://:9093\n"
                               "advertised.listeners=PLAINTEXT://kafka1.example:19093\n")
    assert (cfg.listener.host, cfg.listener.port) == ("", 9093)
    assert (cfg.advertised_listener.host, cfg.advertised_listener.port) == (
        "kafka1.example", 19093)


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]"])
def test_a_listener_on_any_address_needs_advertised_listeners(tmp_path: Path, host: str) -> None:
    with pytest.raises(ConfigError, match="advertised.listeners") as info:
        load_props(tmp_path, f"listeners=PLAINTEXT://{host}:9092\n")
    assert "server.properties:1" in str(info.value)
    cfg = load_props(tmp_path, f"listeners=PLAINTEXT://{host}:9092\n"
                               "advertised.listeners=PLAINTEXT://10.1.2.3:9092\n")
    assert cfg.advertised_listener.host == "10.1.2.3"


def test_kafka_keys_logkeeper_does_not_use_make_one_sorted_warning(tmp_path: Path) -> None:
    cfg = load_props(tmp_path, "num.network.threads=3\nbroker.id=1\n"
                               "queued.max.requests=500\nnum.io.threads=8\n")
    assert cfg.broker_id == 1
    assert len(cfg.warnings) == 1
    assert cfg.warnings[0].endswith(
        ": num.io.threads, num.network.threads, queued.max.requests")
    assert str(tmp_path / "server.properties") in cfg.warnings[0]
    # the same in TOML
    cfg = load_text(tmp_path, "num.network.threads = 3\n")
    assert len(cfg.warnings) == 1 and cfg.warnings[0].endswith(": num.network.threads")
    assert load_props(tmp_path, "broker.id=1\n").warnings == ()


def test_a_key_nobody_knows_stops_with_the_closest_known_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_props(tmp_path, "broker.id=1\nnum.netwrok.threads=3\nlog.retention.hour=1\n")
    message = str(info.value)
    assert "'log.retention.hour' (did you mean 'log.retention.hours'?)" in message
    assert "'num.netwrok.threads' (did you mean 'num.network.threads'?)" in message
    assert "server.properties:3" in message  # the first unknown key, sorted


def test_a_repeated_property_key_keeps_the_last_as_kafka_does(tmp_path: Path) -> None:
    cfg = load_props(tmp_path, "num.partitions=2\nnum.partitions=5\n")
    assert cfg["num.partitions"] == 5
    assert any("num.partitions" in w and "line 1" in w for w in cfg.warnings)


@pytest.mark.parametrize("name", ["broker.conf", "server.cfg", "kafka"])
def test_a_file_that_is_not_toml_is_read_as_properties(tmp_path: Path, name: str) -> None:
    cfg = load_props(tmp_path, "log.dirs=/k/a\nlisteners=PLAINTEXT://:9094\n", name)
    assert cfg.log_dirs == ("/k/a",) and cfg.listener.port == 9094
    with pytest.raises(ConfigError) as info:
        load_props(tmp_path, "log.dirs=/k/a\nbroker.id=x\n", name)
    message = str(info.value)
    assert "Java properties" in message and "not valid TOML" in message
    assert "broker.id = 'x'" in message


def test_a_toml_file_by_content_stays_toml(tmp_path: Path) -> None:
    cfg = load_props(tmp_path, 'log.dirs = ["/k/a", "/k/b"]\nbroker.id = 4\n', "broker.conf")
    assert cfg.log_dirs == ("/k/a", "/k/b") and cfg.broker_id == 4
    with pytest.raises(ConfigError, match="TOML"):  # *.toml is never read as properties
        load_props(tmp_path, "log.dirs=/k/a\n", "logkeeper.toml")


def test_example_server_properties_is_valid() -> None:
    cfg = config.load(REPO / "systemd" / "server.properties")
    assert cfg.log_dirs == ("/data/disk0", "/data/disk1", "/data/disk2")
    assert cfg.standalone and cfg.broker_id == 0
    assert (cfg.listener.host, cfg.listener.port) == ("", 9092)
    assert cfg["log.retention.ms"] == 168 * 3600 * 1000
    assert len(cfg.warnings) == 1 and "num.network.threads" in cfg.warnings[0]


def test_replica_fetch_settings_are_kafkas_and_the_wait_stays_within_the_lag(
        tmp_path: Path) -> None:
    """The follower's fetch settings default to Kafka's, are used (no "does not use"
    warning), and a wait longer than replica.lag.time.max.ms is refused as Kafka
    refuses it: caught-up followers would leave the ISR."""
    cfg = config.load(None)
    assert [cfg[f"replica.fetch.{k}"] for k in (
        "max.bytes", "response.max.bytes", "wait.max.ms", "min.bytes", "backoff.ms")] == [
        1048576, 10485760, 500, 1, 1000]
    cfg = load_props(tmp_path, "replica.fetch.max.bytes=8388608\n")
    assert cfg["replica.fetch.max.bytes"] == 8388608 and cfg.warnings == ()
    with pytest.raises(ConfigError, match="replica.fetch.wait.max.ms = 40000 must not "
                                          "exceed replica.lag.time.max.ms = 30000"):
        load_props(tmp_path, "replica.fetch.wait.max.ms=40000\n")
    cfg = load_props(tmp_path, "replica.fetch.wait.max.ms=40000\nreplica.lag.time.max.ms=60000\n")
    assert cfg["replica.fetch.wait.max.ms"] == 40000
