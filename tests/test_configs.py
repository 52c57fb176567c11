"""Topic and broker configs on a standalone daemon, through real admin clients
(kafka-python's KafkaAdminClient, confluent-kafka's AdminClient) and the
`logkeeper configs` command: set at creation, described as Kafka describes them, changed
at runtime and taking effect at once (retention frees segments, min.insync.replicas
changes what acks=all answers), refused with Kafka's codes when wrong, kept across a
restart (docs/cluster.md "Topic and broker configs")."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin as ca
import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import InvalidConfigurationError
from kafka.protocol.admin import DescribeConfigsRequest

from tests import faults
from tests.daemon_helpers import Daemon, RawClient, running
from tests.sick_helpers import produce_raw, wait_for

REPO = Path(__file__).resolve().parent.parent
DYNAMIC_TOPIC_CONFIG = ca.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
STATIC_BROKER_CONFIG = ca.ConfigSource.STATIC_BROKER_CONFIG.value
DEFAULT_CONFIG = ca.ConfigSource.DEFAULT_CONFIG.value


def segments(d: Daemon, topic: str) -> list[Path]:
    return sorted(p for ld in d.log_dirs for p in ld.glob(f"{topic}-*/*.log"))


def describe(d: Daemon, topic: str) -> dict[str, ca.ConfigEntry]:
    a = ca.AdminClient({"bootstrap.servers": d.bootstrap})
    [f] = a.describe_configs([ca.ConfigResource("topic", topic)]).values()
    return f.result(30)


def incremental(d: Daemon, topic: str, **ops: str | None) -> None:
    """SET each name=value (DELETE where the value is None) with confluent-kafka."""
    a = ca.AdminClient({"bootstrap.servers": d.bootstrap})
    entries = [ca.ConfigEntry(k.replace("_", "."), v or "", incremental_operation=(
        ca.AlterConfigOpType.DELETE if v is None else ca.AlterConfigOpType.SET))
        for k, v in ops.items()]
    [f] = a.incremental_alter_configs([ca.ConfigResource(
        "topic", topic, incremental_configs=entries)]).values()
    f.result(30)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", "configs", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory):
    with running(tmp_path_factory.mktemp("configs"), {
            "log.segment.bytes": 64 * 1024, "auto.create.topics.enable": False}) as d:
        yield d


def test_kafka_python_creates_with_configs_and_refuses_bad_ones(daemon: Daemon) -> None:
    a = KafkaAdminClient(bootstrap_servers=daemon.bootstrap)
    try:
        a.create_topics([NewTopic("kp", 2, 1, topic_configs={
            "retention.ms": "3600000", "cleanup.policy": "delete"})])
        got = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")])
        kp = got["topic"]["kp"] if isinstance(got, dict) else None
        assert kp is not None and kp["retention.ms"]["value"] == "3600000"
        assert kp["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        for bad in ({"retention.ms": "soon"}, {"no.such.config": "1"},
                    {"compression.type": "brotli"}, {"min.insync.replicas": "0"}):
            with pytest.raises(InvalidConfigurationError):
                a.create_topics([NewTopic("kp-bad", 1, 1, topic_configs=bad)])
        assert "kp-bad" not in a.list_topics()
        got = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp",
                                              configs={"segment.bytes": "-5"})])
        assert "[Error 40] InvalidConfigurationError" in str(got["topic"]["kp"])
        assert "segment.bytes" in str(got["topic"]["kp"])
        got = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "nope",
                                              configs={"retention.ms": "1"})],
                              raise_on_unknown=False)
        assert "[Error 3]" in str(got["topic"]["nope"])
    finally:
        a.close()
    # The refused change changed nothing.
    entries = describe(daemon, "kp")
    assert entries["retention.ms"].value == "3600000"
    assert entries["segment.bytes"].value == str(64 * 1024)
    assert entries["segment.bytes"].source == STATIC_BROKER_CONFIG
    assert entries["retention.bytes"].source == DEFAULT_CONFIG


def test_lowering_retention_at_runtime_frees_segments(daemon: Daemon) -> None:
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap, "linger.ms": 5, "batch.size": 16384})
    a = ca.AdminClient({"bootstrap.servers": daemon.bootstrap})
    [f] = a.create_topics([ca.NewTopic("ret", 1, 1)]).values()
    f.result(30)
    for i in range(3000):
        p.produce("ret", value=b"%06d" % i + b"x" * 200, partition=0)
    assert p.flush(30) == 0
    before = segments(daemon, "ret")
    assert len(before) >= 5, before
    assert describe(daemon, "ret")["retention.bytes"].value == "-1"
    incremental(daemon, "ret", retention_bytes="100000")
    entries = describe(daemon, "ret")
    assert entries["retention.bytes"].value == "100000"
    assert entries["retention.bytes"].source == DYNAMIC_TOPIC_CONFIG
    # At once, not at the next retention round (log.retention.check.interval.ms is 5 min).
    after = segments(daemon, "ret")
    assert len(after) < len(before) and sum(s.stat().st_size for s in after) <= 100000 + 64 * 1024
    c = ck.Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": "g"})
    low, high = c.get_watermark_offsets(ck.TopicPartition("ret", 0), timeout=10)
    c.close()
    assert high == 3000 and low > 0


def test_segment_index_bytes_sizes_the_indexes_and_rolls_when_full(daemon: Daemon) -> None:
    """A topic created with configs copied from a Kafka cluster: segment.index.bytes sizes
    each new segment's preallocated indexes (a full one rolls the segment), and the
    deprecated message.format.version and message.downconversion.enable are taken and
    described, with no effect, as Kafka 3.x takes them."""
    a = ca.AdminClient({"bootstrap.servers": daemon.bootstrap})
    [f] = a.create_topics([ca.NewTopic("idx", 1, 1, config={
        "segment.index.bytes": "8192", "index.interval.bytes": "0",
        "message.format.version": "2.8-IV1", "message.downconversion.enable": "false"})]).values()
    f.result(30)
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap, "linger.ms": 0})
    p.produce("idx", value=b"first", partition=0)
    assert p.flush(30) == 0
    [log_dir] = {s.parent for s in segments(daemon, "idx")}
    assert (log_dir / "00000000000000000000.index").stat().st_size == 8192
    assert (log_dir / "00000000000000000000.timeindex").stat().st_size == 8192 // 12 * 12
    entries = describe(daemon, "idx")
    assert (entries["segment.index.bytes"].value, entries["segment.index.bytes"].source) == (
        "8192", DYNAMIC_TOPIC_CONFIG)
    assert entries["message.format.version"].value == "2.8-IV1"
    assert entries["message.downconversion.enable"].value == "false"
    # Room for 3 offset entries and 2 time entries: one entry a batch (index.interval.bytes
    # 0), so the segments roll every 2 batches, and every record reads back.
    [f] = a.create_topics([ca.NewTopic("idx-small", 1, 1, config={
        "segment.index.bytes": "24", "index.interval.bytes": "0"})]).values()
    f.result(30)
    for i in range(12):
        p.produce("idx-small", value=b"%d" % i, partition=0, timestamp=1_700_000_000_000 + i)
        assert p.flush(30) == 0
    assert len(segments(daemon, "idx-small")) == 6
    c = ck.Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": "idx"})
    c.assign([ck.TopicPartition("idx-small", 0, 0)])
    got: list[bytes] = []
    wait_for(lambda: got.extend(m.value() for m in c.consume(50, 0.5) if not m.error())
             or len(got) >= 12, 30, "every record")
    c.close()
    assert got == [b"%d" % i for i in range(12)]


def test_min_insync_replicas_changes_what_acks_all_answers(daemon: Daemon) -> None:
    a = ca.AdminClient({"bootstrap.servers": daemon.bootstrap})
    [f] = a.create_topics([ca.NewTopic("mir", 1, 1)]).values()
    f.result(30)
    c = RawClient(daemon.port)
    try:
        assert produce_raw(c, "mir", 0, [b"a"]) == (0, 0)
        incremental(daemon, "mir", min_insync_replicas="2")
        assert produce_raw(c, "mir", 0, [b"b"])[0] == 19  # NOT_ENOUGH_REPLICAS: one broker
        incremental(daemon, "mir", min_insync_replicas=None)
        assert describe(daemon, "mir")["min.insync.replicas"].source == DEFAULT_CONFIG
        assert produce_raw(c, "mir", 0, [b"c"]) == (0, 1)
    finally:
        c.close()


def test_broker_resource_shows_the_effective_config(daemon: Daemon) -> None:
    a = ca.AdminClient({"bootstrap.servers": daemon.bootstrap})
    [f] = a.describe_configs([ca.ConfigResource("broker", "1")]).values()
    entries = f.result(30)
    seg = entries["log.segment.bytes"]
    assert (seg.value, seg.source, seg.is_read_only) == (str(64 * 1024), STATIC_BROKER_CONFIG, False)
    assert entries["broker.id"].is_read_only and entries["broker.id"].value == "1"
    assert entries["num.partitions"].source == DEFAULT_CONFIG
    assert entries["num.partitions"].is_default
    # Another broker's id is refused, as Kafka does (clients send it to that broker).
    R = DescribeConfigsRequest.DescribeConfigsResource
    c = RawClient(daemon.port)
    try:
        resp = c.request(DescribeConfigsRequest(resources=[
            R(resource_type=4, resource_name="7", configuration_keys=None),
            R(resource_type=4, resource_name="", configuration_keys=None)],
            include_synonyms=False, include_documentation=False), 4)
    finally:
        c.close()
    other, defaults = resp.results
    assert other.error_code == 42 and "Unexpected broker id" in other.error_message
    assert (defaults.error_code, defaults.configs) == (0, [])  # no dynamic defaults set


def test_the_configs_command_describes_and_alters(daemon: Daemon) -> None:
    a = ca.AdminClient({"bootstrap.servers": daemon.bootstrap})
    [f] = a.create_topics([ca.NewTopic("cmd", 1, 1)]).values()
    f.result(30)
    done = cli("alter", "--bootstrap-server", daemon.bootstrap, "--topic", "cmd",
               "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]")
    assert done.returncode == 0, done.stderr
    assert "Completed updating config for topic cmd." in done.stdout
    shown = cli("describe", "--config", str(daemon.config), "--topic", "cmd")
    assert shown.returncode == 0, shown.stderr
    assert "retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000" \
        in shown.stdout
    assert "cleanup.policy=compact,delete" in shown.stdout
    bad = cli("alter", "--bootstrap-server", daemon.bootstrap, "--topic", "cmd",
              "--add-config", "retention.ms=tomorrow")
    assert bad.returncode == 1 and "INVALID_CONFIG" not in bad.stdout
    assert "error 40" in bad.stderr and "nothing changed" in bad.stderr
    as_json = json.loads(cli("describe", "--bootstrap-server", daemon.bootstrap, "--topic",
                             "cmd", "--json").stdout)
    assert {e["name"]: e["value"] for e in as_json}["retention.ms"] == "60000"
    missing = cli("describe", "--bootstrap-server", daemon.bootstrap, "--topic", "nope")
    assert missing.returncode == 1 and "error 3" in missing.stderr
    # Deleting a key not set on the topic (a typo, say) fails as kafka-configs.sh does,
    # before anything changes: the --add-config beside it is not applied either.
    typo = cli("alter", "--bootstrap-server", daemon.bootstrap, "--topic", "cmd",
               "--add-config", "retention.ms=70000", "--delete-config", "no.such.key,flush.ms")
    assert typo.returncode == 2
    assert "Invalid config(s): no.such.key,flush.ms" in typo.stderr, typo.stderr
    kept = json.loads(cli("describe", "--bootstrap-server", daemon.bootstrap, "--topic",
                          "cmd", "--json").stdout)
    assert {e["name"]: e["value"] for e in kept}["retention.ms"] == "60000"
    gone = cli("alter", "--bootstrap-server", daemon.bootstrap, "--topic", "cmd",
               "--delete-config", "retention.ms")
    assert gone.returncode == 0, gone.stderr
    for args in (["--broker-defaults"], ["--client", "nobody"]):
        unset = cli("alter", "--bootstrap-server", daemon.bootstrap, *args,
                    "--delete-config", "log.retention.ms" if len(args) == 1
                    else "producer_byte_rate")
        assert unset.returncode == 2 and "Invalid config(s)" in unset.stderr, unset.stderr


def test_configs_survive_a_restart(tmp_path: Path) -> None:
    d = Daemon(tmp_path, {"auto.create.topics.enable": False})
    with d:
        a = ca.AdminClient({"bootstrap.servers": d.bootstrap})
        [f] = a.create_topics([ca.NewTopic("kept", 1, 1, config={
            "retention.bytes": "123456"})]).values()
        f.result(30)
        incremental(d, "kept", max_message_bytes="2000")
        assert d.stop() == 0
        d.start()
        entries = describe(d, "kept")
        assert entries["retention.bytes"].value == "123456"
        assert entries["max.message.bytes"].value == "2000"
        c = RawClient(d.port)
        try:
            assert produce_raw(c, "kept", 0, [b"x" * 5000])[0] == 10  # MESSAGE_TOO_LARGE
            # Under max.message.bytes but over segment.bytes: Kafka's UnifiedLog.append
            # answers RECORD_LIST_TOO_LARGE, nothing written.
            incremental(d, "kept", segment_bytes="1024")
            assert produce_raw(c, "kept", 0, [b"x" * 1500])[0] == 18
            assert produce_raw(c, "kept", 0, [b"x" * 500]) == (0, 0)
        finally:
            c.close()
    record = json.loads((tmp_path / "disk0" / "logkeeper-configs.json").read_text())
    assert record["topics"]["kept"] == {"retention.bytes": "123456", "max.message.bytes": "2000",
                                        "segment.bytes": "1024"}


def test_lowering_retention_with_the_command_brings_a_saturated_dir_back(
        tmp_path: Path) -> None:
    """Issue #11 section 4: a dir under its free-space floor (SATURATED) refuses appends;
    the operator lowers the topic's retention.ms with `logkeeper configs alter`; its
    segments are deleted at once and the dir is ONLINE again by itself."""
    with faults.tmpfs("16m") as small:
        dirs = [small / "d", tmp_path / "other"]
        d = Daemon(tmp_path / "broker", {
            "log.dirs": [str(x) for x in dirs], "log.segment.bytes": 256 * 1024,
            "log.dir.min.free.bytes": 6 << 20, "log.dir.resume.free.bytes": 9 << 20,
            "log.dir.probe.interval.ms": 100, "auto.create.topics.enable": False})
        d.log_dirs = dirs
        with d:
            assert d.admin("log-dirs/cordon", dirs[1])[0] == 200
            a = ca.AdminClient({"bootstrap.servers": d.bootstrap})
            [f] = a.create_topics([ca.NewTopic("big", 1, 1)]).values()
            f.result(30)
            assert d.admin("log-dirs/uncordon", dirs[1])[0] == 200
            assert (dirs[0] / "big-0").is_dir()
            p = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 5,
                             "batch.size": 200_000})
            for _ in range(50):
                p.produce("big", value=b"y" * 100_000, partition=0)
            assert p.flush(30) == 0
            (small / "ballast").write_bytes(b"\0" * (5 << 20))
            wait_for(lambda: d.log_dir_states()[str(dirs[0])] == "saturated", 10, "SATURATED")
            c = RawClient(d.port)
            try:
                assert produce_raw(c, "big", 0, [b"refused"])[0] == 56
            finally:
                c.close()
            time.sleep(1.1)  # every record is older than the retention about to be set
            done = cli("alter", "--bootstrap-server", d.bootstrap, "--topic", "big",
                       "--add-config", "retention.ms=1000")
            assert done.returncode == 0, done.stderr
            assert sum(s.stat().st_size for s in segments(d, "big")) == 0
            wait_for(lambda: d.log_dir_states()[str(dirs[0])] == "online", 10, "ONLINE again")
            c = RawClient(d.port)
            try:
                assert produce_raw(c, "big", 0, [b"accepted"]) == (0, 50)
            finally:
                c.close()
            shown = cli("describe", "--bootstrap-server", d.bootstrap, "--topic", "big")
            assert "retention.ms=1000" in shown.stdout


def test_delete_records_and_create_partitions(daemon: Daemon) -> None:
    """DeleteRecords moves the log start (ListOffsets EARLIEST answers it, whole segments
    below go); CreatePartitions adds partitions that take writes; bad requests are
    refused with Kafka's codes and change nothing."""
    from kafka import TopicPartition as KTP
    from kafka.admin import NewPartitions

    a = ca.AdminClient({"bootstrap.servers": daemon.bootstrap})
    [f] = a.create_topics([ca.NewTopic("dr", 1, 1)]).values()
    f.result(30)
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap, "linger.ms": 5, "batch.size": 16384})
    for _ in range(2000):
        p.produce("dr", value=b"z" * 200, partition=0)
    assert p.flush(30) == 0
    before = segments(daemon, "dr")
    [f] = a.delete_records([ck.TopicPartition("dr", 0, 1500)]).values()
    assert f.result(30).low_watermark == 1500
    assert len(segments(daemon, "dr")) < len(before)
    c = ck.Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": "g"})
    assert c.get_watermark_offsets(ck.TopicPartition("dr", 0), timeout=10) == (1500, 2000)
    [f] = a.delete_records([ck.TopicPartition("dr", 0, 2001)]).values()
    with pytest.raises(ck.KafkaException, match="OFFSET_OUT_OF_RANGE"):
        f.result(30)
    # A compacted topic's records are its keys' latest values: not deleted by offset
    # (Kafka's deleteRecordsOnLeader), and nothing moves.
    [f] = a.create_topics([ca.NewTopic("dr-keys", 1, 1,
                                       config={"cleanup.policy": "compact"})]).values()
    f.result(30)
    for i in range(10):
        p.produce("dr-keys", key=b"k%d" % i, value=b"v", partition=0)
    assert p.flush(30) == 0
    [f] = a.delete_records([ck.TopicPartition("dr-keys", 0, 5)]).values()
    with pytest.raises(ck.KafkaException, match="POLICY_VIOLATION"):
        f.result(30)
    assert c.get_watermark_offsets(ck.TopicPartition("dr-keys", 0), timeout=10) == (0, 10)
    k = KafkaAdminClient(bootstrap_servers=daemon.bootstrap)
    try:
        got = k.delete_records({KTP("dr", 0): -1})  # -1: up to the high watermark
        assert got[KTP("dr", 0)]["low_watermark"] == 2000
        k.create_partitions({"dr": NewPartitions(3)})
    finally:
        k.close()
    [f] = a.create_partitions([ca.NewPartitions("dr", 2)]).values()
    with pytest.raises(ck.KafkaException, match="INVALID_PARTITIONS"):
        f.result(30)
    [f] = a.create_partitions([ca.NewPartitions("nope", 2)]).values()
    with pytest.raises(ck.KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        f.result(30)
    assert sorted(c.list_topics("dr", timeout=10).topics["dr"].partitions) == [0, 1, 2]
    r = RawClient(daemon.port)
    try:
        assert produce_raw(r, "dr", 2, [b"new partition"]) == (0, 0)
    finally:
        r.close()
    assert c.get_watermark_offsets(ck.TopicPartition("dr", 0), timeout=10) == (2000, 2000)
    c.close()


def test_dynamic_broker_config_applies_to_topics_without_their_own(tmp_path: Path) -> None:
    """A broker's log.retention.bytes changed at runtime (`logkeeper configs alter
    --broker`) applies at once to every topic that has no retention.bytes of its own,
    is described with source DYNAMIC_BROKER_CONFIG, and outlives a restart; a key that
    cannot change at runtime is refused with 40. Deleting a topic forgets its configs."""
    d = Daemon(tmp_path, {"log.segment.bytes": 64 * 1024, "auto.create.topics.enable": False})
    with d:
        a = ca.AdminClient({"bootstrap.servers": d.bootstrap})
        for f in a.create_topics([ca.NewTopic("plain", 1, 1), ca.NewTopic("own", 1, 1, config={
                "retention.bytes": "-1"})]).values():
            f.result(30)
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 5, "batch.size": 16384})
        for _ in range(2000):
            p.produce("plain", value=b"p" * 200, partition=0)
            p.produce("own", value=b"o" * 200, partition=0)
        assert p.flush(30) == 0
        own_before = len(segments(d, "own"))
        done = cli("alter", "--bootstrap-server", d.bootstrap, "--broker", "1",
                   "--add-config", "log.retention.bytes=100000")
        assert done.returncode == 0, done.stderr
        assert sum(s.stat().st_size for s in segments(d, "plain")) <= 100000 + 64 * 1024
        assert len(segments(d, "own")) == own_before  # its own -1 wins
        e = describe(d, "plain")["retention.bytes"]
        assert (e.value, e.source) == ("100000", ca.ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        refused = cli("alter", "--bootstrap-server", d.bootstrap, "--broker", "1",
                      "--add-config", "log.dirs=/elsewhere")
        assert refused.returncode == 1 and "Cannot update these configs dynamically" in \
            refused.stderr
        shown = cli("describe", "--bootstrap-server", d.bootstrap, "--broker", "1")
        assert "log.retention.bytes=100000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:" \
            in shown.stdout
        [f] = a.delete_topics(["own"], operation_timeout=30).values()
        f.result(30)
        [f] = a.create_topics([ca.NewTopic("own", 1, 1)]).values()
        f.result(30)
        assert describe(d, "own")["retention.bytes"].value == "100000"
        assert d.stop() == 0
        d.start()
        assert describe(d, "plain")["retention.bytes"].value == "100000"


def test_describe_shows_only_what_is_set_on_the_resource_itself() -> None:
    """kafka-configs.sh --describe lists a topic's DYNAMIC_TOPIC_CONFIG entries, one
    broker's DYNAMIC_BROKER_CONFIG and the broker defaults' DYNAMIC_DEFAULT_BROKER_CONFIG:
    a cluster-wide default is not shown as if it were the topic's or the broker's own."""
    from daemon.tools import configs

    def entry(name: str, value: str, source: str) -> dict:
        return {"name": name, "value": value, "source": source, "sensitive": False,
                "synonyms": [{"name": name, "value": value, "source": source}]}

    inherited = entry("unclean.leader.election.enable", "true", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    from_broker = entry("retention.ms", "86400000", "DYNAMIC_BROKER_CONFIG")
    own = entry("max.message.bytes", "2000000", "DYNAMIC_TOPIC_CONFIG")
    topic = configs.render([own, from_broker, inherited], configs.TOPIC, "orders", False)
    assert topic.splitlines()[1:] == [
        "  max.message.bytes=2000000 sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=2000000}"]
    broker = configs.render([from_broker, inherited], configs.BROKER, "1", False)
    assert [line.split("=")[0].strip() for line in broker.splitlines()[1:]] == ["retention.ms"]
    defaults = configs.render([inherited], configs.BROKER, "", False)
    assert "unclean.leader.election.enable=true" in defaults
    everything = configs.render([own, from_broker, inherited], configs.TOPIC, "orders", True)
    assert len(everything.splitlines()) == 4


def test_the_configs_command_takes_kafka_configs_entity_options(daemon: Daemon) -> None:
    """kafka-configs.sh's own way of naming the resource works as written for it:
    `--alter --entity-type topics --entity-name T`, `--entity-default` of brokers, a
    user's client-id pair; an entity type we do not have is refused with why."""
    a = ca.AdminClient({"bootstrap.servers": daemon.bootstrap})
    [f] = a.create_topics([ca.NewTopic("entity", 1, 1)]).values()
    f.result(30)
    done = cli("--alter", "--bootstrap-server", daemon.bootstrap, "--entity-type", "topics",
               "--entity-name", "entity", "--add-config", "retention.ms=123000")
    assert done.returncode == 0, done.stderr
    assert "Completed updating config for topic entity." in done.stdout
    shown = json.loads(cli("--describe", "--bootstrap-server", daemon.bootstrap,
                           "--entity-type=topics", "--entity-name=entity", "--json").stdout)
    assert {e["name"]: e["value"] for e in shown}["retention.ms"] == "123000"
    done = cli("--alter", "--bootstrap-server", daemon.bootstrap, "--entity-type", "brokers",
               "--entity-default", "--add-config", "message.max.bytes=1048700")
    assert done.returncode == 0, done.stderr
    assert "message.max.bytes=1048700" in cli(
        "describe", "--bootstrap-server", daemon.bootstrap, "--broker-defaults").stdout
    assert cli("alter", "--bootstrap-server", daemon.bootstrap, "--broker-defaults",
               "--delete-config", "message.max.bytes").returncode == 0
    done = cli("alter", "--bootstrap-server", daemon.bootstrap, "--entity-type", "users",
               "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "app",
               "--add-config", "producer_byte_rate=2048000")
    assert done.returncode == 0, done.stderr
    assert "producer_byte_rate=2048000" in cli(
        "describe", "--bootstrap-server", daemon.bootstrap, "--user", "alice",
        "--client", "app").stdout
    bad = cli("describe", "--bootstrap-server", daemon.bootstrap, "--entity-type", "ips",
              "--entity-name", "1.2.3.4")
    assert bad.returncode == 2 and "--entity-type ips: not one of" in bad.stderr
    bad = cli("describe", "--bootstrap-server", daemon.bootstrap, "--entity-type", "topics")
    assert bad.returncode == 2 and "needs --entity-name" in bad.stderr
