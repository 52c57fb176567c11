"""Consumer groups and committed offsets (docs/groups.md) as users meet them: real
clients (kafka-python, confluent-kafka, aiokafka, Debian's kcat) subscribe with a
group.id against a real daemon, split partitions, hand them over when a member leaves,
and resume from committed offsets after the daemon restarts; the admin clients list,
describe and delete groups; `__consumer_offsets` holds Kafka's own records (read from
real Kafka brokers' fixtures, and written by us the same way).
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import ProduceRequest, TxnOffsetCommitRequest

from daemon.api import errors
from daemon.coordinator import records
from daemon.coordinator.group import partition_for
from daemon.tools.groups import COORDINATOR_NOT_READY
from logstore import TopicPartition
from logstore.records import build_batch, iter_batches
from tests import faults

from .cluster_helpers import Cluster, wait_for
from .daemon_helpers import Daemon, RawClient
from .test_cli import cli

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "kafka"
GROUP_KEYS = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5,
              "group.min.session.timeout.ms": 1000}


def fixture_partitions() -> list[Path]:
    return sorted(FIXTURES.glob("kafka-*/__consumer_offsets-*"))


def fixture_records(partition_dir: Path) -> list[Any]:
    out = []
    for seg in sorted(partition_dir.glob("*.log")):
        for b in iter_batches(seg.read_bytes()):
            out.extend(b.records())
    return out


# ---- the records and the partition of a group, against Kafka's own bytes ----


def test_kafkas_group_records_decode_and_ours_encode_to_the_same_bytes() -> None:
    """Every record of the Kafka 2.7 and 3.0 fixtures' __consumer_offsets decodes, and
    encoding what was decoded gives Kafka's bytes back, key and value."""
    seen = {"offset": 0, "group": 0, "tombstone": 0}
    for d in fixture_partitions():
        for rec in fixture_records(d):
            entry = records.decode(rec.key, rec.value)
            if isinstance(entry, records.OffsetEntry):
                assert records.offset_key(entry.group, entry.tp) == rec.key
            else:
                assert records.group_key(entry.group) == rec.key
            if entry.value is None:
                seen["tombstone"] += 1
                continue
            version = int.from_bytes(rec.value[:2], "big")
            if isinstance(entry, records.OffsetEntry):
                seen["offset"] += 1
                if version in (records.OFFSET_VALUE_VERSION,
                               records.OFFSET_VALUE_VERSION_WITH_EXPIRY):
                    assert records.offset_value(entry.value) == rec.value
            else:
                seen["group"] += 1
                if version == records.GROUP_VALUE_VERSION:
                    assert records.group_value(entry.value) == rec.value
    assert seen["offset"] > 3000 and seen["group"] > 20 and seen["tombstone"] > 0, seen


def test_a_group_lives_in_the_partition_kafka_puts_it_in() -> None:
    """Kafka put each group of the fixtures in abs(hashCode(group)) % 50; so do we."""
    checked = 0
    for d in fixture_partitions():
        partition = int(d.name.rsplit("-", 1)[1])
        for rec in fixture_records(d):
            entry = records.decode(rec.key, rec.value)
            assert partition_for(entry.group, 50) == partition, (entry.group, d)
            checked += 1
    assert checked > 3000
    assert partition_for("my-first-app", 50) == 13


def test_a_record_that_is_not_a_group_record_is_refused_with_its_reason() -> None:
    with pytest.raises(records.GroupRecordError, match="key version 7"):
        records.decode(b"\x00\x07abc", b"")
    with pytest.raises(records.GroupRecordError, match="without a key"):
        records.decode(None, b"\x00\x03")
    with pytest.raises(records.GroupRecordError, match="does not parse"):
        records.decode(records.offset_key("g", TopicPartition("t", 0)), b"\x00\x03\x00")


def test_dump_log_decodes_consumer_offsets_as_kafkas_tool_does() -> None:
    part = FIXTURES / "kafka-2.7.1" / "__consumer_offsets-39"
    run = subprocess.run([sys.executable, "-m", "daemon.cli", "dump-log", "--offsets-decoder",
                          "--json", str(part)], capture_output=True, text=True, timeout=60,
                         cwd=REPO)
    assert run.returncode == 0, run.stderr
    recs = [r for f in json.loads(run.stdout)["files"] for b in f["batches"]
            for r in b["records"]]
    commit = next(json.loads(r["payload"]) for r in recs
                  if json.loads(r["key"])["type"] == "offset_commit" and r["payload"] != "null")
    assert commit["offset"] == 9 and commit["metadata"] == ""
    assert any(r["payload"] == "null" for r in recs)  # tombstones print as null


# ---- a standalone daemon and real clients ----


def produce(bootstrap: str, topic: str, n: int, start: int = 0, partitions: int = 4) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(start, start + n):
        p.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions)
    p.flush()
    p.close()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        a.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        a.close()


# kafka-python 3.0.12 loses an assignment when a poll's timeout runs out during a
# JoinGroup/SyncGroup round trip that a metadata change started (its leader assigned
# before the topic's metadata arrived): the round trip finishes in the background, the
# next poll finds nothing left to rejoin and never applies what SyncGroup returned, so
# the member sits in the group with no partitions. Under load 200 ms polls hit this in
# about 1 run of 5; a poll long enough to see the round trip through does not (it
# returns as soon as records arrive, so it costs nothing while they flow).
POLL_MS = 2000


class Member(threading.Thread):
    """A kafka-python KafkaConsumer in a group, polling in its own thread; records what
    it is assigned and what it read."""

    def __init__(self, bootstrap: str, topic: str, group: str):
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
            max_poll_interval_ms=30000)
        self.read: list[bytes] = []
        self.assigned: set[int] = set()
        self.stop_now = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop_now.is_set():
            batches = self.consumer.poll(timeout_ms=POLL_MS)
            with self.lock:
                for recs in batches.values():
                    self.read.extend(r.value for r in recs)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
                if batches:
                    self.consumer.commit()
        self.consumer.close()  # leaves the group

    def leave(self) -> None:
        self.stop_now.set()
        self.join(30)


def commit_as(bootstrap: str, group: str, offsets: list[tuple[str, int, int]]) -> None:
    """Commit (topic, partition, offset) for `group` from outside any membership, as a
    confluent consumer that never subscribed commits."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False})
    c.commit(offsets=[ck.TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False)
    c.close()


def needs(present: bool, what: str) -> None:
    """Skip without `what` (say how to get it); in CI its absence is a failure."""
    if not present:
        if faults.in_ci():
            raise AssertionError(f"{what} is missing; make test installs it")
        pytest.skip(f"{what} is not installed here; make test installs it")


@contextmanager
def restarted(d: Daemon) -> Iterator[KafkaAdminClient]:
    """Stop and start `d`, then an admin client on it (closed on exit)."""
    d.stop()
    d.start()
    ka = KafkaAdminClient(bootstrap_servers=d.bootstrap)
    try:
        yield ka
    finally:
        ka.close()


@contextmanager
def daemon(tmp_path: Path, **extra: Any) -> Iterator[Daemon]:
    with Daemon(tmp_path / "broker", {**GROUP_KEYS, **extra}, dirs=2) as d:
        yield d


def test_two_kafka_python_members_split_partitions_one_leaves_and_commits_survive_a_restart(
        tmp_path: Path) -> None:
    topic, group = "orders", "billing"
    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, topic, 4)
        produce(d.bootstrap, topic, 200)
        a, b = Member(d.bootstrap, topic, group), Member(d.bootstrap, topic, group)
        a.start()
        b.start()
        wait_for(lambda: len(a.assigned) == 2 and len(b.assigned) == 2
                 and a.assigned | b.assigned == {0, 1, 2, 3}, 60, "the partitions split 2 + 2")
        wait_for(lambda: len(a.read) + len(b.read) >= 200, 60, "200 records read")
        b.leave()
        wait_for(lambda: a.assigned == {0, 1, 2, 3}, 60, "the remaining member to take all 4")
        produce(d.bootstrap, topic, 100, start=200)
        wait_for(lambda: len(a.read) + len(b.read) >= 300, 60, "300 records read")
        assert sorted(set(a.read) | set(b.read)) == sorted(b"v%d" % i for i in range(300))
        a.leave()
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        committed = admin.list_group_offsets(group)[group]
        admin.close()
        assert {tp.partition: om.offset for tp, om in committed.items()} == {
            p: 75 for p in range(4)}
        d.stop()
        d.start()
        produce(d.bootstrap, topic, 40, start=300)
        c = Member(d.bootstrap, topic, group)
        c.start()
        try:
            wait_for(lambda: len(c.read) >= 40, 60, "the records after the commits")
            time.sleep(1.0)  # nothing older may follow
            assert sorted(c.read) == sorted(b"v%d" % i for i in range(300, 340))
        finally:
            c.leave()


def test_confluent_members_split_and_take_over_and_lz4_batches_stay_lz4_on_disk(
        tmp_path: Path) -> None:
    """librdkafka ties its lz4 support to FindCoordinator being served: its batches now
    reach the disk lz4-compressed; two confluent consumers split the partitions, one
    closes, the other takes them all, and close() returns at once."""
    topic, group = "events", "cg"
    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, topic, 2)
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "compression.type": "lz4",
                         "linger.ms": 5})
        for i in range(200):
            p.produce(topic, key=b"k%d" % i, value=b"payload-%d " % i * 8, partition=i % 2)
        assert p.flush(30) == 0
        dump = subprocess.run([sys.executable, "-m", "daemon.cli", "dump-log", "--json",
                               *(str(ld / f"{topic}-{i}") for i in range(2)
                                 for ld in d.log_dirs if (ld / f"{topic}-{i}").is_dir())],
                              capture_output=True, text=True, timeout=60, cwd=REPO)
        codecs = {b["compresscodec"] for f in json.loads(dump.stdout)["files"]
                  for b in f["batches"]}
        assert codecs == {"lz4"}, codecs

        conf = {"bootstrap.servers": d.bootstrap, "group.id": group,
                "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500}
        c1, c2 = ck.Consumer(conf), ck.Consumer(conf)
        got: dict[str, list[bytes]] = {"c1": [], "c2": []}
        c1.subscribe([topic])
        c2.subscribe([topic])

        def poll_both() -> bool:
            for name, c in (("c1", c1), ("c2", c2)):
                m = c.poll(0.1)
                if m is not None and not m.error():
                    got[name].append(m.value())
            return len(c1.assignment()) == 1 and len(c2.assignment()) == 1
        wait_for(poll_both, 60, "one partition each")
        wait_for(lambda: poll_both() and len(got["c1"]) + len(got["c2"]) >= 200
                 or len(got["c1"]) + len(got["c2"]) >= 200, 60, "200 records")
        c2.commit(asynchronous=False)
        started = time.monotonic()
        c2.close()
        assert time.monotonic() - started < 10  # it blocked 46 s before groups were served

        def c1_has_both() -> bool:
            m = c1.poll(0.1)
            if m is not None and not m.error():
                got["c1"].append(m.value())
            return len(c1.assignment()) == 2
        wait_for(c1_has_both, 60, "c1 to take both partitions")
        assert len(set(got["c1"]) | set(got["c2"])) == 200
        c1.close()


def test_aiokafka_and_kcat_consume_as_groups_and_resume_from_their_commits(
        tmp_path: Path) -> None:
    needs(importlib.util.find_spec("aiokafka") is not None, "aiokafka (a test extra)")
    import aiokafka
    kcat = shutil.which("kcat")
    needs(kcat is not None, "kcat (Debian package kcat)")
    topic = "clicks"
    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, topic, 2)
        produce(d.bootstrap, topic, 60, partitions=2)

        async def aio(n: int) -> list[bytes]:
            c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=d.bootstrap, group_id="aio",
                                          auto_offset_reset="earliest",
                                          enable_auto_commit=False)
            await c.start()
            out: list[bytes] = []
            try:
                while len(out) < n:
                    batches = await c.getmany(timeout_ms=500)
                    for recs in batches.values():
                        out.extend(r.value for r in recs)
                await c.commit()
            finally:
                await c.stop()
            return out

        first = asyncio.run(asyncio.wait_for(aio(60), 60))
        assert sorted(first) == sorted(b"v%d" % i for i in range(60))

        def kcat_group() -> list[str]:
            # Not `-o beginning`: that is an absolute start, whatever was committed.
            run = subprocess.run([kcat, "-b", d.bootstrap, "-G", "kg", topic, "-e", "-q",
                                  "-f", "%s\\n", "-X", "auto.offset.reset=earliest",
                                  "-X", "session.timeout.ms=6000"],
                                 capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, run.stderr
            return [line for line in run.stdout.splitlines() if line]

        assert sorted(kcat_group()) == sorted(f"v{i}" for i in range(60))
        produce(d.bootstrap, topic, 20, start=60, partitions=2)
        d.stop()
        d.start()
        second = asyncio.run(asyncio.wait_for(aio(20), 60))
        assert sorted(second) == sorted(b"v%d" % i for i in range(60, 80))
        assert sorted(kcat_group()) == sorted(f"v{i}" for i in range(60, 80))


def test_admin_clients_list_describe_and_delete_groups(tmp_path: Path) -> None:
    topic = "audit"
    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, topic, 1)
        produce(d.bootstrap, topic, 10, partitions=1)
        m = Member(d.bootstrap, topic, "live")
        m.start()
        wait_for(lambda: len(m.read) == 10, 60, "the member to read")
        commit_as(d.bootstrap, "done", [(topic, 0, 7)])
        ka = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        ca = AdminClient({"bootstrap.servers": d.bootstrap})
        try:
            # A member may rejoin now and then (kafka-python's leader does when metadata
            # changes): Stable is waited for, not caught at one instant.
            wait_for(lambda: {g["group_id"]: g["group_state"] for g in ka.list_groups()}
                     == {"live": "Stable", "done": "Empty"}, 30, "live Stable, done Empty")

            def described_stable() -> Any:
                live = ca.describe_consumer_groups(["live"])["live"].result(30)
                return live if live.state == ck.ConsumerGroupState.STABLE else None
            live = wait_for(described_stable, 30, "DescribeGroups to show live Stable")
            assert [len(x.assignment.topic_partitions) for x in live.members] == [1]
            assert ka.describe_groups(["nobody"])["nobody"]["group_state"] == "Dead"
            # What the principal may do with a group that is not there, as Kafka answers
            # it: a script checks this before it creates the group's offsets.
            nobody = ca.describe_consumer_groups(
                ["nobody"], include_authorized_operations=True)["nobody"].result(30)
            assert nobody.state == ck.ConsumerGroupState.DEAD
            assert sorted(op.name for op in nobody.authorized_operations or []) == [
                "ALTER_CONFIGS", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ"]
            assert ka.list_group_offsets("done")["done"][KTP(topic, 0)].offset == 7
            # Offsets are the members' while it has some: an admin's change is refused
            # as Kafka refuses it, and changes nothing.
            before = committed_offsets(d.bootstrap, "live")
            altered = ca.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(
                "live", [ck.TopicPartition(topic, 0, 2)])])["live"]
            [refused] = altered.result(30).topic_partitions
            assert refused.error is not None and refused.error.name() == "UNKNOWN_MEMBER_ID"
            assert committed_offsets(d.bootstrap, "live") == before
            res = ca.delete_consumer_groups(["live", "done"], request_timeout=30)
            with pytest.raises(ck.KafkaException, match="NON_EMPTY_GROUP"):
                res["live"].result(30)
            res["done"].result(30)
        finally:
            m.leave()
            ka.close()
        with restarted(d) as ka:
            wait_for(lambda: {g["group_id"] for g in ka.list_groups()} == {"live"}, 30,
                     "the deleted group to stay deleted after a restart")
            assert ka.list_group_offsets("done")["done"] == {}


def test_groups_of_other_protocols_are_neither_listed_nor_described_as_consumer_groups(
        tmp_path: Path) -> None:
    """Karapace's schema registries elect their primary in a group of protocol type "sr"
    (Kafka Connect's workers in one of "connect"). kafka-consumer-groups.sh --list leaves
    such a group out (the admin client's listConsumerGroups keeps protocol types
    "consumer" and "") and --describe refuses it ("GroupId schema-registry is not a
    consumer group (sr)."); `groups list` listed Karapace's group among the consumer
    groups, and `describe` showed its members as consumers holding nothing."""
    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, "t", 1)
        commit_as(d.bootstrap, "app", [("t", 0, 3)])
        raw = RawClient(d.port)
        try:
            # The JoinGroup of Karapace's master election (its protocol type and name).
            P = JoinGroupRequest[5].JoinGroupRequestProtocol

            def join(member_id: str) -> Any:
                return raw.request(JoinGroupRequest[5](
                    group_id="schema-registry", session_timeout_ms=30000,
                    rebalance_timeout_ms=30000, member_id=member_id, group_instance_id=None,
                    protocol_type="sr", protocols=[P(name="v0", metadata=b'{"version":2}')]), 5)
            first = wait_for(lambda: (r := join("")).error_code
                             != errors.COORDINATOR_LOAD_IN_PROGRESS and r, 30,
                             "the coordinator to load")
            assert first.error_code == errors.MEMBER_ID_REQUIRED
            joined = join(first.member_id)
            assert joined.error_code == errors.NONE and joined.leader == first.member_id
            ka = KafkaAdminClient(bootstrap_servers=d.bootstrap)
            try:  # the broker's ListGroups answers every group (app: offsets only), as Kafka's
                assert {g["group_id"]: g["protocol_type"] for g in ka.list_groups()} == {
                    "app": "", "schema-registry": "sr"}
            finally:
                ka.close()

            def groups(action: str, *args: str) -> subprocess.CompletedProcess:
                return cli("groups", action, "--bootstrap-server", d.bootstrap, *args)
            listed = groups("list")
            assert listed.returncode == 0 and listed.stdout.split() == ["app"], listed
            states = groups("list", "--state")
            assert states.returncode == 0 and "schema-registry" not in states.stdout, states
            refused = groups("describe", "--group", "schema-registry")
            assert refused.returncode == 1
            assert "GroupId schema-registry is not a consumer group (sr)." in refused.stderr
            both = groups("describe", "--group", "app", "--group", "schema-registry", "--json")
            assert both.returncode == 1 and "not a consumer group (sr)" in both.stderr
            assert [g["group"] for g in json.loads(both.stdout)] == ["app"]
            every = groups("describe", "--all-groups", "--json")
            assert every.returncode == 0, every.stderr
            assert [(g["group"], [r["current_offset"] for r in g["partitions"]])
                    for g in json.loads(every.stdout)] == [("app", [3])]
        finally:
            raw.close()


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as kafka-python's admin client lists them; asked
    again while the coordinator is loading or not yet known (just after a start), as
    Kafka's own admin client retries those, where kafka-python raises them."""
    ka = KafkaAdminClient(bootstrap_servers=bootstrap)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                return {(tp.topic, tp.partition): o.offset
                        for tp, o in ka.list_group_offsets(group)[group].items()}
            except kafka_errors.BrokerResponseError as err:
                if err.errno not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
    finally:
        ka.close()


def test_reset_offsets_over_several_topics_exports_and_restores_a_groups_offsets(
        tmp_path: Path) -> None:
    """kafka-consumer-groups.sh's reset scopes: --topic given twice (one with a
    partition list), --all-topics (the partitions the group has offsets for), --export
    (topic,partition,offset lines) and --from-file putting a saved set back, each checked
    against what kafka-python's admin client reads; a bad file, a missing scope or
    --dry-run with --execute is refused (exit 2) and changes nothing."""
    with daemon(tmp_path) as d:
        def groups(*args: str) -> subprocess.CompletedProcess:
            return cli("groups", "reset-offsets", "--bootstrap-server", d.bootstrap,
                       "--group", "ops", *args)

        def committed() -> dict[tuple[str, int], int]:
            return committed_offsets(d.bootstrap, "ops")

        for topic in ("pay", "ship", "other"):
            create_topic(d.bootstrap, topic, 2)
            produce(d.bootstrap, topic, 20, partitions=2)  # 10 per partition
        first = groups("--topic", "pay", "--topic", "ship:1", "--to-offset", "4", "--execute")
        assert first.returncode == 0, first.stderr
        assert committed() == {("pay", 0): 4, ("pay", 1): 4, ("ship", 1): 4}
        saved = groups("--all-topics", "--to-current", "--export")
        assert saved.returncode == 0, saved.stderr
        assert saved.stdout.split() == ["pay,0,4", "pay,1,4", "ship,1,4"]
        backup = tmp_path / "ops.csv"
        backup.write_text(saved.stdout)

        moved = groups("--all-topics", "--shift-by", "3", "--execute")
        assert moved.returncode == 0, moved.stderr
        assert committed() == {("pay", 0): 7, ("pay", 1): 7, ("ship", 1): 7}
        latest = groups("--topic", "ship", "--topic", "other:0", "--to-latest", "--execute")
        assert latest.returncode == 0, latest.stderr
        assert committed() == {("pay", 0): 7, ("pay", 1): 7, ("ship", 0): 10, ("ship", 1): 10,
                               ("other", 0): 10}

        for bad, said in ((["--all-topics", "--to-earliest", "--dry-run", "--execute"],
                           "not allowed with argument"),
                          (["--to-earliest", "--execute"], "needs its partitions"),
                          (["--from-file", str(tmp_path / "none.csv"), "--execute"], "none.csv"),
                          (["--from-file", str(tmp_path / "bad.csv"), "--execute"],
                           "bad.csv:2: 'pay,x,1' is not topic,partition,offset")):
            (tmp_path / "bad.csv").write_text("pay,0,1\npay,x,1\n")
            got = groups(*bad)
            assert got.returncode == 2 and said in got.stderr, (bad, got.stderr)
        assert committed()[("pay", 0)] == 7

        dry = groups("--from-file", str(backup), "--dry-run")
        assert dry.returncode == 0 and dry.stdout.splitlines()[-1].split() == ["ops", "ship", "1", "4"]
        assert committed()[("ship", 1)] == 10
        only_pay = groups("--from-file", str(backup), "--topic", "pay", "--execute")
        assert only_pay.returncode == 0, only_pay.stderr
        assert committed()[("pay", 0)] == 4 and committed()[("ship", 1)] == 10
        restored = groups("--from-file", str(backup), "--execute")
        assert restored.returncode == 0, restored.stderr
        assert committed() == {("pay", 0): 4, ("pay", 1): 4, ("ship", 0): 10, ("ship", 1): 4,
                               ("other", 0): 10}


def test_delete_offsets_removes_a_groups_offsets_of_the_topics_named_only(tmp_path: Path) -> None:
    """kafka-consumer-groups.sh --delete-offsets (OffsetDelete): with the group's member
    reading `live`, its offsets of `old` (no longer subscribed) go and those of `live`
    stay; asking for `live` is refused per partition (the member subscribes to it), an
    unknown topic gets a row of its own, an unknown group Kafka's error; each refusal
    exits 1 and changes nothing."""
    with daemon(tmp_path) as d:
        def groups(action: str, *args: str) -> subprocess.CompletedProcess:
            return cli("groups", action, "--bootstrap-server", d.bootstrap, *args)

        def committed() -> dict[tuple[str, int], int]:
            return committed_offsets(d.bootstrap, "mixed")

        for topic in ("old", "live"):
            create_topic(d.bootstrap, topic, 2)
            produce(d.bootstrap, topic, 10, partitions=2)
        assert groups("reset-offsets", "--group", "mixed", "--topic", "old", "--to-offset", "3",
                      "--execute").returncode == 0
        m = Member(d.bootstrap, "live", "mixed")
        m.start()
        try:
            wait_for(lambda: len(m.read) == 10 and len(committed()) == 4, 60,
                     "the member reading live and committing")
            refused = groups("delete-offsets", "--group", "mixed", "--topic", "live:0")
            assert refused.returncode == 1, refused
            assert "partition level error" in refused.stderr
            assert "Request succeed" not in refused.stdout  # Kafka's: the error instead
            assert refused.stdout.splitlines()[-1].split()[:3] == ["live", "0", "Error:"]
            assert "actively subscribed" in refused.stdout
            done = groups("delete-offsets", "--group", "mixed", "--topic", "old", "--topic", "nosuch")
            assert done.returncode == 1, done  # the unknown topic's row
            lines = done.stdout.splitlines()
            assert lines[0] == "Request succeed for deleting offsets with topic old, nosuch group mixed"
            assert "partition level error" not in done.stderr  # unknown to the tool: a row
            assert [x.split()[:3] for x in lines[2:]] == [
                ["TOPIC", "PARTITION", "STATUS"], ["nosuch", "-", "Error:"],
                ["old", "0", "Successful"], ["old", "1", "Successful"]]
            assert committed() == {("live", 0): 5, ("live", 1): 5}
        finally:
            m.leave()
        nog = groups("delete-offsets", "--group", "nog", "--topic", "old")
        assert nog.returncode == 1 and "Error: 'nog' does not exist." in nog.stderr, nog
        assert committed() == {("live", 0): 5, ("live", 1): 5}


def test_the_groups_command_shows_lag_resets_offsets_and_deletes(tmp_path: Path) -> None:
    """kafka-consumer-groups.sh's --list, --describe (offsets, lag, who holds each
    partition), --reset-offsets and --delete, checked against what a consumer then
    reads and what kafka-python's admin client sees."""
    topic = "lagging"
    with daemon(tmp_path) as d:
        def groups(action: str, *args: str) -> subprocess.CompletedProcess:
            return cli("groups", action, "--bootstrap-server", d.bootstrap, *args)
        create_topic(d.bootstrap, topic, 2)
        produce(d.bootstrap, topic, 20, partitions=2)  # 10 per partition
        m = Member(d.bootstrap, topic, "app")
        m.start()
        try:
            wait_for(lambda: len(m.read) == 20, 60, "the member to read")
            produce(d.bootstrap, topic, 6, start=20, partitions=2)  # 3 more each
            wait_for(lambda: len(m.read) == 26, 60, "the member to read the rest")

            def described() -> Any:  # it commits what it read, once it has read it
                out = groups("describe", "--group", "app", "--json")
                desc = json.loads(out.stdout) if out.returncode == 0 else None
                return desc if desc and desc["state"] == "Stable" and [
                    r["current_offset"] for r in desc["partitions"]] == [13, 13] else None
            desc = wait_for(described, 30, "offsets 13 committed, the group Stable")
            assert [(r["partition"], r["log_end_offset"], r["lag"])
                    for r in desc["partitions"]] == [(0, 13, 0), (1, 13, 0)]
            [member] = desc["members"]
            assert {r["consumer_id"] for r in desc["partitions"]} == {member["member_id"]}
            assert sorted(member["partitions"]) == [f"{topic}-0", f"{topic}-1"]
            busy = groups("reset-offsets", "--group", "app", "--topic", topic,
                          "--to-earliest", "--execute")
            assert busy.returncode == 1 and "error 68" in busy.stderr
        finally:
            m.leave()
        time.sleep(0.05)  # the records so far are older than `cut`, the next 4 newer
        cut = datetime.datetime.now(datetime.UTC)
        time.sleep(0.05)
        produce(d.bootstrap, topic, 4, start=26, partitions=2)  # unread: a lag of 2 each
        table = groups("describe", "--group", "app")
        assert table.returncode == 0, table.stderr
        assert "Consumer group 'app' has no active members." in table.stdout
        assert table.stdout.splitlines()[-1].split() == ["app", topic, "1", "13", "15", "2",
                                                         "-", "-", "-"]
        assert groups("list").stdout.split() == ["app"]

        plan = groups("reset-offsets", "--group", "app", "--topic", f"{topic}:1",
                      "--shift-by", "-5")
        assert plan.returncode == 0 and plan.stdout.splitlines()[-1].split() == [
            "app", topic, "1", "8"]
        # by time: the first record at or after it (CreateTime), the log end after all
        for when, offsets in ((cut.isoformat(timespec="milliseconds"), ["13", "13"]),
                              ("2999-01-01T00:00:00Z", ["15", "15"])):
            by_time = groups("reset-offsets", "--group", "app", "--topic", topic,
                             "--to-datetime", when)
            assert [x.split()[3] for x in by_time.stdout.splitlines()[1:]] == offsets, by_time
        hour = groups("reset-offsets", "--group", "app", "--topic", topic, "--by-duration", "PT1H")
        assert [x.split()[3] for x in hour.stdout.splitlines()[1:]] == ["0", "0"], hour.stderr
        bad = groups("reset-offsets", "--group", "app", "--topic", topic, "--by-duration", "1h")
        assert bad.returncode == 2 and "ISO 8601" in bad.stderr
        ka = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            assert ka.list_group_offsets("app")["app"][KTP(topic, 1)].offset == 13  # a plan only
            done = groups("reset-offsets", "--group", "app", "--topic", f"{topic}:1",
                          "--to-offset", "99", "--execute")  # past the end: the end
            assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines()[-1].split() == ["app", topic, "1", "15"]
            assert groups("reset-offsets", "--group", "app", "--topic", topic,
                          "--to-earliest", "--execute").returncode == 0
            assert {tp.partition: o.offset for tp, o in
                    ka.list_group_offsets("app")["app"].items()} == {0: 0, 1: 0}
        finally:
            ka.close()
        # the group's consumer starts again from the reset offsets
        again = Member(d.bootstrap, topic, "app")
        again.start()
        try:
            wait_for(lambda: len(again.read) == 30, 60, "every record read again")
        finally:
            again.leave()
        assert groups("delete", "--group", "app").stdout == (
            "Deletion of requested consumer groups ('app') was successful.\n")
        gone = groups("describe", "--group", "app")
        assert gone.returncode == 1 and "does not exist" in gone.stderr
        assert groups("list").stdout == "\n"


def test_offset_delete_drops_commits_of_topics_a_group_no_longer_reads(tmp_path: Path) -> None:
    """OffsetDelete (kafka-consumer-groups.sh --delete-offsets, kafka-python's
    `delete_group_offsets`): an Empty group loses the commits asked for and keeps the
    others, also after a restart; an active consumer group keeps those of the topics its
    members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) and loses the others; a group that
    does not exist is GROUP_ID_NOT_FOUND."""
    from kafka.errors import (
        GroupIdNotFoundError,
        GroupSubscribedToTopicError,
        NoError,
        UnknownTopicOrPartitionError,
    )

    with daemon(tmp_path) as d:
        for topic in ("read", "dropped"):
            create_topic(d.bootstrap, topic, 1)
        produce(d.bootstrap, "read", 5, partitions=1)
        commit_as(d.bootstrap, "gone", [("read", 0, 4), ("dropped", 0, 2)])
        m = Member(d.bootstrap, "read", "live")
        m.start()
        ka = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            wait_for(lambda: len(m.read) == 5, 60, "the live member to read")
            got = ka.delete_group_offsets("gone", [KTP("dropped", 0), KTP("read", 1)])
            # read has no partition 1: Kafka answers it before asking the coordinator.
            assert got == {KTP("dropped", 0): NoError, KTP("read", 1): UnknownTopicOrPartitionError}
            assert {tp: o.offset for tp, o in ka.list_group_offsets("gone")["gone"].items()} \
                == {KTP("read", 0): 4}
            wait_for(lambda: {g["group_id"]: g["group_state"] for g in ka.list_groups()}
                     .get("live") == "Stable", 30, "live Stable")
            got = ka.delete_group_offsets("live", [KTP("read", 0), KTP("dropped", 0)])
            assert got == {KTP("read", 0): GroupSubscribedToTopicError,
                           KTP("dropped", 0): NoError}
            assert KTP("read", 0) in ka.list_group_offsets("live")["live"]
            with pytest.raises(GroupIdNotFoundError):
                ka.delete_group_offsets("nobody", [KTP("read", 0)])
        finally:
            m.leave()
            ka.close()
        with restarted(d) as ka:
            assert {tp: o.offset for tp, o in ka.list_group_offsets("gone")["gone"].items()} \
                == {KTP("read", 0): 4}


def test_bad_group_requests_get_kafkas_errors_and_change_nothing(tmp_path: Path) -> None:
    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, "t", 1)
        c = RawClient(d.port)
        try:
            find = FindCoordinatorRequest[1](key="g", key_type=0)
            wait_for(lambda: c.request(find, 1).error_code == errors.NONE, 30,
                     "FindCoordinator to make __consumer_offsets and name this broker")
            P = JoinGroupRequest[5].JoinGroupRequestProtocol
            join = JoinGroupRequest[5](group_id="g", session_timeout_ms=10, rebalance_timeout_ms=1000,
                                       member_id="", group_instance_id=None,
                                       protocol_type="consumer",
                                       protocols=[P(name="range", metadata=b"")])
            coordinator_ready = wait_for(
                lambda: (r := c.request(join, 5)).error_code
                != errors.COORDINATOR_LOAD_IN_PROGRESS and r, 30, "the coordinator to load")
            assert coordinator_ready.error_code == errors.INVALID_SESSION_TIMEOUT
            T = OffsetCommitRequest[8].OffsetCommitRequestTopic
            commit = OffsetCommitRequest[8](
                group_id="g", generation_id_or_member_epoch=3, member_id="nobody",
                group_instance_id=None, topics=[T(name="t", partitions=[
                    T.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                   committed_leader_epoch=-1,
                                                   committed_metadata="")])])
            # A generation for a group that is not there: a member of a group gone
            # since (Kafka's handleCommitOffsets), and nothing is written.
            resp = c.request(commit, 8)
            assert resp.topics[0].partitions[0].error_code == errors.ILLEGAL_GENERATION
            big = OffsetCommitRequest[8](
                group_id="g", generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=[T(name="t", partitions=[
                    T.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                   committed_leader_epoch=-1,
                                                   committed_metadata="x" * 5000)])])
            resp = c.request(big, 8)
            assert resp.topics[0].partitions[0].error_code == errors.OFFSET_METADATA_TOO_LARGE
            PT = ProduceRequest[8].TopicProduceData
            produce_req = ProduceRequest[8](transactional_id=None, acks=1, timeout_ms=1000,
                                            topic_data=[PT(name="__consumer_offsets", partition_data=[
                                                PT.PartitionProduceData(
                                                    index=0, records=build_batch([(b"k", b"v")]))])])
            resp = c.request(produce_req, 8)
            assert resp.responses[0].partition_responses[0].error_code == \
                errors.INVALID_TOPIC_EXCEPTION
            # An admin's removal of members from a group that is not there (LeaveGroup
            # v3+, as AdminClient.removeMembersFromConsumerGroup sends it): Kafka
            # answers the group NONE and each member UNKNOWN_MEMBER_ID.
            M = LeaveGroupRequest[3].MemberIdentity
            leave = LeaveGroupRequest[3](group_id="g", members=[
                M(member_id="", group_instance_id="inst-a"),
                M(member_id="m-1", group_instance_id=None)])
            resp = c.request(leave, 3)
            assert resp.error_code == errors.NONE
            assert [(m.member_id, m.group_instance_id, m.error_code) for m in resp.members] == \
                [("", "inst-a", errors.UNKNOWN_MEMBER_ID), ("m-1", None, errors.UNKNOWN_MEMBER_ID)]
            old_leave = LeaveGroupRequest[1](group_id="g", member_id="m-1")
            assert c.request(old_leave, 1).error_code == errors.UNKNOWN_MEMBER_ID
            beat = HeartbeatRequest[3](group_id="g", generation_id=1, member_id="m-1",
                                       group_instance_id=None)
            assert c.request(beat, 3).error_code == errors.UNKNOWN_MEMBER_ID
        finally:
            c.close()
        ka = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            assert ka.list_groups() == []
            assert ka.list_group_offsets("g")["g"] == {}
        finally:
            ka.close()


def test_offset_commit_v1_as_old_sarama_sends_and_v2_retention_expire_as_in_kafka(
        tmp_path: Path) -> None:
    """OffsetCommit v1 is what sarama 1.22's consumer groups send (Debian's package): Kafka
    3.9 serves it, so it is answered, not the connection closed, and the offsets are
    committed. A v2-4 commit's retention time makes its offsets expire that long after
    the commit (Kafka's expire timestamp) while the broker's retention keeps the rest."""
    with daemon(tmp_path, **{"offsets.retention.check.interval.ms": 300}) as d:
        create_topic(d.bootstrap, "t", 2)
        c = RawClient(d.port)
        try:
            find = FindCoordinatorRequest[1](key="old-sarama", key_type=0)
            wait_for(lambda: c.request(find, 1).error_code == errors.NONE, 30,
                     "FindCoordinator to make __consumer_offsets and name this broker")

            def commit(version: int, group: str, offset: int, **extra: Any) -> list[int]:
                T = OffsetCommitRequest[version].OffsetCommitRequestTopic
                req = OffsetCommitRequest[version](
                    group_id=group, generation_id_or_member_epoch=-1, member_id="",
                    topics=[T(name="t", partitions=[
                        T.OffsetCommitRequestPartition(partition_index=i, committed_offset=offset,
                                                       committed_metadata="", **(
                                                           {"commit_timestamp": -1}
                                                           if version == 1 else {}))
                        for i in (0, 1)])], **extra)
                got = wait_for(lambda: (r := c.request(req, version)).topics[0].partitions[0]
                               .error_code != errors.COORDINATOR_LOAD_IN_PROGRESS and r,
                               30, "the coordinator to load")
                return [p.error_code for p in got.topics[0].partitions]

            assert commit(1, "old-sarama", 7) == [errors.NONE, errors.NONE]
            assert commit(2, "short-lived", 3, retention_time_ms=1000) == [errors.NONE] * 2
            assert commit(2, "broker-retention", 4, retention_time_ms=-1) == [errors.NONE] * 2
        finally:
            c.close()
        assert committed_offsets(d.bootstrap, "old-sarama") == {("t", 0): 7, ("t", 1): 7}
        wait_for(lambda: committed_offsets(d.bootstrap, "short-lived") == {}, 30,
                 "the commit's own retention to expire its offsets")
        assert committed_offsets(d.bootstrap, "broker-retention") == {("t", 0): 4, ("t", 1): 4}
        assert committed_offsets(d.bootstrap, "old-sarama") == {("t", 0): 7, ("t", 1): 7}


def test_the_offsets_topic_cannot_be_deleted_or_grown_and_commits_stay(tmp_path: Path) -> None:
    """Deleting __consumer_offsets, or adding partitions to it (which moves each group
    to another partition: hash mod the count), would lose every group's commits;
    refused with INVALID_TOPIC_EXCEPTION and a message, as Kafka's tools refuse both,
    whichever client asks. The commits are still there after."""
    from kafka.admin import NewPartitions
    from kafka.errors import InvalidTopicError

    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, "t", 1)
        commit_as(d.bootstrap, "kept", [("t", 0, 0)])
        ka = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            parts = len(ka.describe_topics(["__consumer_offsets"])[0]["partitions"])
            with pytest.raises(InvalidTopicError):
                ka.delete_topics(["__consumer_offsets"])
            with pytest.raises(InvalidTopicError):
                ka.create_partitions({"__consumer_offsets": NewPartitions(parts + 10)})
            said = cli("topics", "delete", "--bootstrap-server", d.bootstrap, "--topic",
                       "__consumer_offsets")
            assert said.returncode == 1 and "internal topic" in said.stderr
            assert len(ka.describe_topics(["__consumer_offsets"])[0]["partitions"]) == parts
            assert ka.list_group_offsets("kept")["kept"][KTP("t", 0)].offset == 0
        finally:
            ka.close()


def fetched_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    """What OffsetFetch for that one partition answers through confluent's admin client
    (-1001, OFFSET_INVALID, when there is no commit)."""
    ca = AdminClient({"bootstrap.servers": bootstrap})
    res = ca.list_consumer_group_offsets(
        [ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, partition)])])
    [tp] = res[group].result(30).topic_partitions
    return tp.offset


def test_deleting_a_topic_drops_the_groups_offsets_of_it_and_a_recreated_one_reads_from_reset(
        tmp_path: Path) -> None:
    """Kafka's onPartitionsDeleted: deleting a topic drops every group's committed
    offsets of it (the other topics' stay), and a group left Empty with none goes. The
    tombstones are written: after a restart they are still gone, and a consumer of the
    re-created topic starts from auto.offset.reset instead of skipping its first
    records at the old topic's offsets."""
    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, "gone", 2)
        create_topic(d.bootstrap, "kept", 1)
        produce(d.bootstrap, "gone", 40, partitions=2)
        produce(d.bootstrap, "kept", 5, partitions=1)
        assert len(consume_new(d.bootstrap, "gone", "reader", 40)) == 40  # subscribed: Empty now
        commit_as(d.bootstrap, "mixed", [("gone", 0, 20), ("gone", 1, 20), ("kept", 0, 5)])
        assert committed_offsets(d.bootstrap, "reader") == {("gone", 0): 20, ("gone", 1): 20}
        ca = AdminClient({"bootstrap.servers": d.bootstrap})
        ca.delete_topics(["gone"], operation_timeout=30)["gone"].result(30)

        def check() -> None:
            assert committed_offsets(d.bootstrap, "mixed") == {("kept", 0): 5}
            assert committed_offsets(d.bootstrap, "reader") == {}
            assert fetched_offset(d.bootstrap, "mixed", "gone", 0) == ck.OFFSET_INVALID
            ka = KafkaAdminClient(bootstrap_servers=d.bootstrap)
            try:
                assert {g["group_id"] for g in ka.list_groups()} == {"mixed"}
            finally:
                ka.close()
        check()
        d.stop()
        d.start()
        check()
        create_topic(d.bootstrap, "gone", 1)
        produce(d.bootstrap, "gone", 30, start=100, partitions=1)
        for group in ("reader", "mixed"):
            got = consume_new(d.bootstrap, "gone", group, 30)
            assert sorted(got) == sorted(b"v%d" % i for i in range(100, 130)), group


# ---- a cluster: the coordinator's broker dies, then its disk ----


def consume_new(bootstrap: str, topic: str, group: str, n: int) -> list[bytes]:
    """A confluent consumer in `group` reads what follows the group's commits: exactly
    `n` records (one more second shows nothing older follows), commits, closes."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 6000})
    c.subscribe([topic])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 90
        settle = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
            if len(got) >= n:
                settle = settle or time.monotonic() + 1.0
                if time.monotonic() >= settle:
                    break
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def coordinator_of(cl: Any, group: str) -> int:
    """The leader of the group's __consumer_offsets partition (one partition here), as
    the first live broker that knows one answers."""
    assert partition_for(group, 1) == 0
    tp = ("__consumer_offsets", 0)

    def leader() -> int | None:
        for b in cl.alive():
            v = cl.metadata(b, [tp[0]])["partitions"].get(tp)
            if v is not None and v[0] > 0:
                return v[0]
        return None
    return wait_for(leader, 60, "a coordinator for the group")


def test_commits_survive_the_coordinators_broker_killed_and_then_its_disk_failing(
        tmp_path: Path) -> None:
    """3 brokers, __consumer_offsets with RF 3 on loop-mounted ext4 dirs. The group's
    coordinator is killed with SIGKILL: another broker leads its partition, loads it, and
    a new consumer resumes exactly after the last commit. Then that new coordinator's
    disk fails (EIO): the partition moves again through the log_dir_event, its broker
    stays up, and the next consumer again resumes exactly after the last commit."""
    from .cluster_helpers import Cluster
    from .test_replication import create

    topic, group = "payments", "ledger"
    extra = {**GROUP_KEYS, "offsets.topic.num.partitions": 1,
             "offsets.topic.replication.factor": 3}
    with faults.loop_ext4(64) as m1, faults.loop_ext4(64) as m2, faults.loop_ext4(64) as m3:
        loops = {1: m1, 2: m2, 3: m3}
        dirs = {b: [m / "d", tmp_path / f"b{b}-other"] for b, m in loops.items()}
        with Cluster(tmp_path, log_dirs=dirs, extra=extra) as cl:
            for b, d in cl.brokers.items():  # everything on the loop dirs
                assert d.admin("log-dirs/cordon", dirs[b][1])[0] == 200
            create(cl, topic, 1, min_isr=2)
            bootstrap = ",".join(d.bootstrap for d in cl.brokers.values())
            produce(bootstrap, topic, 100, partitions=1)
            assert sorted(consume_new(bootstrap, topic, group, 100)) == sorted(
                b"v%d" % i for i in range(100))
            first = coordinator_of(cl, group)
            assert (dirs[first][0] / "__consumer_offsets-0").is_dir()

            cl.brokers[first].kill()
            second = wait_for(lambda: (c := coordinator_of(cl, group)) != first and c, 60,
                              "another coordinator after the kill")
            produce(bootstrap, topic, 50, start=100, partitions=1)
            assert sorted(consume_new(bootstrap, topic, group, 50)) == sorted(
                b"v%d" % i for i in range(100, 150))
            cl.brokers[first].start()

            faults.shutdown_fs(loops[second])
            third = wait_for(lambda: (c := coordinator_of(cl, group)) != second and c, 60,
                             "the coordinator to move off the dead disk")
            produce(bootstrap, topic, 50, start=150, partitions=1)
            assert sorted(consume_new(bootstrap, topic, group, 50)) == sorted(
                b"v%d" % i for i in range(150, 200))
            assert cl.brokers[second].proc.poll() is None, "the broker with the dead disk died"
            ka = KafkaAdminClient(bootstrap_servers=bootstrap)
            try:
                offsets = ka.list_group_offsets(group)[group]
            finally:
                ka.close()
            assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 200}
            assert third != second


def test_a_deleted_topics_offsets_go_on_a_coordinator_holding_none_of_it(tmp_path: Path) -> None:
    """2 brokers: the group's coordinator (leader of the one __consumer_offsets
    partition) holds no replica of the topic, and DeleteTopics goes to the other broker.
    The controller's UpdateMetadata (leader -2) reaches the coordinator, which drops the
    group's offsets of the topic and writes the tombstones: gone after the coordinator
    restarts too, and the re-created topic is read from its start."""
    from .cluster_helpers import Cluster
    from .test_replication import create

    group = "far"
    extra = {**GROUP_KEYS, "offsets.topic.num.partitions": 1,
             "offsets.topic.replication.factor": 1}
    with Cluster(tmp_path, brokers=2, dirs=1, extra=extra) as cl:
        bootstrap = ",".join(d.bootstrap for d in cl.brokers.values())
        c = RawClient(cl.brokers[1].port)
        try:
            find = FindCoordinatorRequest[1](key=group, key_type=0)
            wait_for(lambda: c.request(find, 1).error_code == errors.NONE, 60,
                     "FindCoordinator to make __consumer_offsets and name its leader")
        finally:
            c.close()
        coordinator = coordinator_of(cl, group)
        [other] = [b for b in cl.brokers if b != coordinator]
        create(cl, "t", 1, min_isr=1, assignment=[[other]])
        produce(bootstrap, "t", 20, partitions=1)
        commit_as(bootstrap, group, [("t", 0, 20)])
        assert committed_offsets(bootstrap, group) == {("t", 0): 20}

        ca = AdminClient({"bootstrap.servers": cl.brokers[other].bootstrap})
        ca.delete_topics(["t"], operation_timeout=30)["t"].result(60)
        wait_for(lambda: committed_offsets(bootstrap, group) == {}, 20,
                 lambda: f"the offsets to go; still {committed_offsets(bootstrap, group)}")
        cl.brokers[coordinator].stop()
        cl.brokers[coordinator].start()
        assert coordinator_of(cl, group) == coordinator

        def fetched_after_restart() -> int | None:
            try:
                return fetched_offset(bootstrap, group, "t", 0)
            except ck.KafkaException:  # the coordinator still loading, clients reconnecting
                return None
        # -1001 (no commit) or a commit's offset above 0: either is an answer
        after = wait_for(fetched_after_restart, 60,
                         "OffsetFetch answered after the coordinator's restart")
        assert after == ck.OFFSET_INVALID

        create(cl, "t", 1, min_isr=1, assignment=[[other]])
        produce(bootstrap, "t", 30, start=100, partitions=1)
        got = consume_new(bootstrap, "t", group, 30)
        assert sorted(got) == sorted(b"v%d" % i for i in range(100, 130))


MEMBER_SCRIPT = f"""
import sys, time
from kafka import KafkaConsumer
c = KafkaConsumer(sys.argv[2], bootstrap_servers=sys.argv[1], group_id=sys.argv[3],
                  session_timeout_ms=3000, heartbeat_interval_ms=300,
                  auto_offset_reset="earliest")
while True:
    c.poll(timeout_ms={POLL_MS})
    print(sorted(tp.partition for tp in c.assignment()), flush=True)
"""


def test_a_member_killed_without_leaving_is_dropped_after_its_session_timeout(
        tmp_path: Path) -> None:
    """A consumer process killed with SIGKILL sends no LeaveGroup: once its session
    timeout (3 s) passes without a heartbeat the coordinator removes it and the other
    member gets its partitions. A static member (group.instance.id) closing and coming
    back replaces its old member id without the group going through a rebalance."""
    topic, group = "jobs", "workers"
    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, topic, 2)
        proc = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, d.bootstrap, topic, group],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        a = Member(d.bootstrap, topic, group)
        try:
            a.start()
            wait_for(lambda: len(a.assigned) == 1, 60, "one partition each")
            proc.kill()
            killed = time.monotonic()
            wait_for(lambda: a.assigned == {0, 1}, 60, "the survivor to take both partitions")
            assert time.monotonic() - killed > 2.0  # not before the session timeout
        finally:
            proc.kill()
            proc.wait()
            a.leave()

        conf = {"bootstrap.servers": d.bootstrap, "group.id": "static",
                "group.instance.id": "worker-1", "session.timeout.ms": 30000,
                "auto.offset.reset": "earliest"}
        ka = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            def members() -> list[Any]:
                g = ka.describe_groups(["static"])["static"]
                return g["members"] if g["group_state"] == "Stable" else []

            for round_ in range(2):
                c = ck.Consumer(conf)
                c.subscribe([topic])
                wait_for(lambda c=c: c.poll(0.1) is None and len(c.assignment()) == 2, 60,
                         "the static member to hold both partitions")
                [m] = wait_for(members, 30, "the group Stable with its one member")
                assert m["group_instance_id"] == "worker-1"
                if round_ == 0:
                    first_id = m["member_id"]
                else:
                    assert m["member_id"] != first_id  # replaced, not added
                c.close()  # a static member does not leave on close
        finally:
            ka.close()


def test_a_nodejs_kafkajs_consumer_group_consumes_commits_and_resumes(tmp_path: Path) -> None:
    """kafkajs (tests/node, pinned) only consumes through a group: it reads what was
    produced, commits on disconnect, and the next run reads only what came after."""
    node = shutil.which("node")
    script = REPO / "tests" / "node" / "group_consumer.js"
    needs(node is not None and (REPO / "tests" / "node" / "node_modules" / "kafkajs").is_dir(),
          "node with tests/node's kafkajs")
    topic = "web"
    with daemon(tmp_path) as d:
        create_topic(d.bootstrap, topic, 2)
        produce(d.bootstrap, topic, 30, partitions=2)

        def run(count: int) -> dict[str, Any]:
            done = subprocess.run([node, str(script), d.bootstrap, topic, "node-app", str(count)],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr[-2000:]
            return json.loads(done.stdout.strip().splitlines()[-1])

        first = run(30)
        assert sorted(first["values"]) == sorted(f"v{i}" for i in range(30))
        [committed] = first["offsets"]
        assert {p["partition"]: p["offset"] for p in committed["partitions"]} == {0: "15", 1: "15"}
        produce(d.bootstrap, topic, 10, start=30, partitions=2)
        second = run(10)
        assert sorted(second["values"]) == sorted(f"v{i}" for i in range(30, 40))


class LogBackedOffsets:
    """The coordinator's `OffsetsLog` over one real `Log` in this process (one partition,
    led here at epoch 0): the coordinator's own logic, writes and reads on a real log,
    with the clock in the test's hands."""

    def __init__(self, path: Path):
        from logstore import Log, LogConfig
        self.log = Log.open(path, LogConfig())

    def partition_count(self) -> int:
        return 1

    def led_epoch(self, partition: int) -> int:
        return 0

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> int:
        self.log.append(batch, leader_epoch=0)
        return 0

    async def append_at(self, partition: int, batch: bytes, timeout_ms: int, *,
                        guard: Any = None) -> tuple[int, int]:
        return 0, self.log.append(batch, leader_epoch=0).base_offset

    async def read_all(self, partition: int) -> list[Any]:
        from daemon.coordinator.internal_topic import read_records
        return read_records(self.log)


def test_an_empty_groups_offsets_expire_after_the_retention_and_stay_expired(
        tmp_path: Path) -> None:
    """offsets.retention.minutes (KIP-211): a consumer group Empty for longer than the
    retention loses its offsets and itself; a commit from outside any membership
    expires that long after it was made; a group with members keeps its offsets. The
    tombstones are on the log: a coordinator loading it again finds nothing expired."""
    from daemon.coordinator.coordinator import GroupCoordinator, GroupSettings, OffsetCommit

    retention = 60_000
    settings = GroupSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000,
                             offsets_retention_ms=retention)
    tp = TopicPartition("t", 0)
    path = tmp_path / "__consumer_offsets-0"

    async def scenario() -> tuple[list[str], list[str], int, int]:
        coord = GroupCoordinator(LogBackedOffsets(path), settings)
        assert coord._owner("x")[0] == errors.COORDINATOR_LOAD_IN_PROGRESS
        await coord._loading[0][1]
        start = int(time.time() * 1000)
        code, _ = await coord.commit("simple", -1, "", None, [OffsetCommit(tp, 5, -1, "")])
        assert code == errors.NONE
        for gid in ("left", "stays"):
            joined = await coord.join(gid, "", None, "c", "/h", 10000, 10000, "consumer",
                                      [("range", b"m")], require_known_member_id=False)
            assert joined.error == errors.NONE
            code, _ = await coord.sync(gid, joined.generation, joined.member_id, None, None,
                                       None, {joined.member_id: b"a"})
            assert code == errors.NONE
            code, per = await coord.commit(gid, joined.generation, joined.member_id, None,
                                           [OffsetCommit(tp, 9, 0, "m")])
            assert (code, per[tp]) == (errors.NONE, errors.NONE)
            if gid == "left":
                assert coord.leave(gid, [(joined.member_id, None)])[0] == errors.NONE
        assert await coord.expire_offsets(start + retention - 5000) == 0
        expired = await coord.expire_offsets(start + retention + 5000)
        after = sorted(coord.groups)
        kept = coord.fetch_offsets("stays", [tp])[1][tp]
        reloaded = GroupCoordinator(LogBackedOffsets(path), settings)
        reloaded._owner("x")
        await reloaded._loading[0][1]
        return after, sorted(reloaded.groups), expired, kept.offset if kept else -1

    after, reloaded, expired, kept = asyncio.run(scenario())
    assert expired == 2
    assert after == reloaded == ["stays"]
    assert kept == 9


def test_a_stable_groups_offsets_of_topics_it_no_longer_reads_expire(tmp_path: Path) -> None:
    """As in Kafka (GroupMetadata.removeExpiredOffsets), a Stable consumer group whose
    members subscribe to "reads" loses, offsets.retention.minutes after their commit,
    its offsets of "left" (a topic it no longer reads) and keeps those of "reads": they
    are gone after a reload of the log too."""
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    from daemon.coordinator.coordinator import GroupCoordinator, GroupSettings, OffsetCommit

    retention = 60_000
    settings = GroupSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000,
                             offsets_retention_ms=retention)
    reads, left = TopicPartition("reads", 0), TopicPartition("left", 0)
    path = tmp_path / "__consumer_offsets-0"
    subscription = ConsumerProtocolSubscription(version=0, topics=["reads"]).encode(version=0)

    async def scenario() -> tuple[int, dict[Any, Any], dict[Any, Any]]:
        coord = GroupCoordinator(LogBackedOffsets(path), settings)
        coord._owner("x")
        await coord._loading[0][1]
        start = int(time.time() * 1000)
        joined = await coord.join("app", "", None, "c", "/h", 10000, 10000, "consumer",
                                  [("range", subscription)], require_known_member_id=False)
        assert joined.error == errors.NONE
        code, _ = await coord.sync("app", joined.generation, joined.member_id, None, None,
                                   None, {joined.member_id: b"a"})
        assert code == errors.NONE
        code, _ = await coord.commit("app", joined.generation, joined.member_id, None,
                                     [OffsetCommit(reads, 9, 0, ""), OffsetCommit(left, 4, 0, "")])
        assert code == errors.NONE
        assert await coord.expire_offsets(start + retention - 5000) == 0
        expired = await coord.expire_offsets(start + retention + 5000)
        kept = coord.fetch_offsets("app", None)[1]
        reloaded = GroupCoordinator(LogBackedOffsets(path), settings)
        reloaded._owner("x")
        await reloaded._loading[0][1]
        return expired, kept, reloaded.fetch_offsets("app", None)[1]

    expired, kept, reloaded = asyncio.run(scenario())
    assert expired == 1
    assert {tp: c.offset for tp, c in kept.items()} == {reads: 9}
    assert {tp: c.offset for tp, c in reloaded.items()} == {reads: 9}


def test_an_offset_commits_own_retention_time_expires_it(tmp_path: Path) -> None:
    """OffsetCommit v2-v4's retention_time_ms, as Kafka's expireTimestamp: the offsets
    expire that long after the commit, whatever offsets.retention.minutes; -1 is the
    broker's retention. Expired, they stay gone after a restart."""
    with daemon(tmp_path, **{"offsets.retention.check.interval.ms": 200}) as d:
        create_topic(d.bootstrap, "t", 1)
        c = RawClient(d.port)
        try:
            wait_for(lambda: c.request(FindCoordinatorRequest[1](key="brief", key_type=0), 1
                                       ).error_code == errors.NONE, 30, "__consumer_offsets")
            T = OffsetCommitRequest[2].OffsetCommitRequestTopic
            for group, retention in (("brief", 1000), ("kept", -1)):
                commit = OffsetCommitRequest[2](
                    group_id=group, generation_id_or_member_epoch=-1, member_id="",
                    retention_time_ms=retention, topics=[T(name="t", partitions=[
                        T.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                       committed_metadata="")])])
                wait_for(lambda commit=commit: c.request(commit, 2).topics[0].partitions[0]
                         .error_code == errors.NONE, 30, f"{group}'s commit")
        finally:
            c.close()
        assert committed_offsets(d.bootstrap, "brief") == {("t", 0): 5}
        wait_for(lambda: committed_offsets(d.bootstrap, "brief") == {}, 10, "brief expired")
        assert committed_offsets(d.bootstrap, "kept") == {("t", 0): 5}
        with restarted(d):
            assert committed_offsets(d.bootstrap, "brief") == {}
            assert committed_offsets(d.bootstrap, "kept") == {("t", 0): 5}


def test_describe_members_state_every_group_and_list_by_state(tmp_path: Path) -> None:
    """kafka-consumer-groups.sh's --describe --members [--verbose], --describe --state,
    several --group / --all-groups, and --list --state [S]: a Stable group with one
    kafka-python member and an Empty one with offsets only."""
    topic = "shown"
    with daemon(tmp_path) as d:
        def groups(action: str, *args: str) -> subprocess.CompletedProcess:
            return cli("groups", action, "--bootstrap-server", d.bootstrap, *args)
        create_topic(d.bootstrap, topic, 3)
        produce(d.bootstrap, topic, 9, partitions=3)
        assert groups("reset-offsets", "--group", "idle", "--topic", topic, "--to-earliest",
                      "--execute").returncode == 0
        m = Member(d.bootstrap, topic, "app")
        m.start()
        try:
            wait_for(lambda: len(m.read) == 9, 60, "the member to read")
            wait_for(lambda: "Stable" in groups("describe", "--group", "app", "--state").stdout,
                     30, "app Stable")
            members = groups("describe", "--group", "app", "--members")
            assert members.returncode == 0, members.stderr
            head, row = [line.split() for line in members.stdout.splitlines()]
            assert head == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            assert row[0] == "app" and row[-1] == "3" and row[1].startswith("kafka-python")
            verbose = groups("describe", "--group", "app", "--members", "--verbose")
            head, row = [line.split() for line in verbose.stdout.splitlines()]
            assert head[-1] == "ASSIGNMENT" and row[-1] == f"{topic}(0,1,2)", verbose.stdout

            state = groups("describe", "--all-groups", "--state")
            assert state.returncode == 0, state.stderr
            blocks = [b.splitlines() for b in state.stdout.strip().split("\n\n")]
            assert [b[0].split() for b in blocks] == [
                ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]] * 2
            app, idle = (b[1].split() for b in blocks)
            assert (app[0], app[1], app[2], app[-2:]) == ("app", d.bootstrap, "(1)",
                                                          ["Stable", "1"])
            assert app[3] in ("range", "roundrobin", "sticky", "cooperative-sticky"), app
            assert idle == ["idle", d.bootstrap, "(1)", "-", "Empty", "0"]

            listed = groups("list", "--state")
            assert [line.split() for line in listed.stdout.splitlines()] == [
                ["GROUP", "STATE"], ["app", "Stable"], ["idle", "Empty"]]
            only = groups("list", "--state", "empty,DEAD")
            assert [line.split() for line in only.stdout.splitlines()] == [
                ["GROUP", "STATE"], ["idle", "Empty"]]
            bad = groups("list", "--state", "sleeping")
            assert bad.returncode == 2 and "Invalid state list 'sleeping'" in bad.stderr

            # Several groups, one that does not exist: the others are shown, it is named.
            some = groups("describe", "--group", "idle", "--group", "nope", "--group", "app")
            assert some.returncode == 1 and "group nope does not exist" in some.stderr
            assert "Consumer group 'idle' has no active members." in some.stdout
            rows = [line.split() for line in some.stdout.splitlines() if line.strip()]
            assert {(r[0], r[2]) for r in rows if r[1] == topic} == {
                (g, str(p)) for g in ("idle", "app") for p in range(3)}
            both = groups("describe", "--group", "app", "--members", "--state")
            assert both.returncode == 2 and "not allowed with" in both.stderr
        finally:
            m.leave()
        empty = groups("describe", "--group", "app", "--members")
        assert empty.stdout == "Consumer group 'app' has no active members.\n"


def test_a_replaced_static_member_is_fenced_and_its_successor_survives_a_reload(
        tmp_path: Path) -> None:
    """KIP-345: a second process joining with the same group.instance.id takes over the
    instance; the first one's Heartbeat, SyncGroup, OffsetCommit and JoinGroup with its
    old member id are answered FENCED_INSTANCE_ID (Kafka checks this before membership),
    not UNKNOWN_MEMBER_ID, which would have it join again and fence its successor in
    turn. The new member id is written to __consumer_offsets, as Kafka's storeGroup
    does: a coordinator loading the partition knows the successor, not the old id."""
    from daemon.coordinator.coordinator import GroupCoordinator, GroupSettings, OffsetCommit

    settings = GroupSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000)
    tp = TopicPartition("t", 0)
    path = tmp_path / "__consumer_offsets-0"

    async def join(coord: GroupCoordinator, member_id: str = "") -> Any:
        return await coord.join("g", member_id, "inst-1", "c", "/h", 10000, 10000, "consumer",
                                [("range", b"m")], require_known_member_id=True)

    async def scenario() -> dict[str, int]:
        coord = GroupCoordinator(LogBackedOffsets(path), settings)
        coord._owner("g")
        await coord._loading[0][1]
        first = await join(coord)
        assert first.error == errors.NONE
        code, _ = await coord.sync("g", first.generation, first.member_id, "inst-1", None,
                                   None, {first.member_id: b"a"})
        assert code == errors.NONE
        second = await join(coord)
        assert second.error == errors.NONE and second.member_id != first.member_id
        old = first.member_id
        got = {
            "heartbeat": coord.heartbeat("g", first.generation, old, "inst-1"),
            "sync": (await coord.sync("g", first.generation, old, "inst-1", None, None,
                                      {}))[0],
            "commit": (await coord.commit("g", first.generation, old, "inst-1",
                                          [OffsetCommit(tp, 1, -1, "")]))[0],
            "join": (await join(coord, old)).error,
        }
        reloaded = GroupCoordinator(LogBackedOffsets(path), settings)
        reloaded._owner("g")
        await reloaded._loading[0][1]
        got["successor after reload"] = reloaded.heartbeat("g", second.generation,
                                                           second.member_id, "inst-1")
        return got

    fenced = errors.FENCED_INSTANCE_ID
    assert asyncio.run(scenario()) == {"heartbeat": fenced, "sync": fenced, "commit": fenced,
                                       "join": fenced, "successor after reload": errors.NONE}


def test_heartbeats_while_the_group_loads_or_goes_dead_get_kafkas_answers(
        tmp_path: Path) -> None:
    """Kafka answers a Heartbeat NONE while the group's partition is still loading (older
    clients do not expect COORDINATOR_LOAD_IN_PROGRESS there), and
    COORDINATOR_NOT_AVAILABLE for a group gone Dead meanwhile (deleted while the member
    still heartbeats), before any membership check, so the member finds the
    coordinator again instead of rejoining a group being removed."""
    from daemon.coordinator.coordinator import GroupCoordinator, GroupSettings

    settings = GroupSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000)

    class HeldAppends(LogBackedOffsets):
        def __init__(self, path: Path):
            super().__init__(path)
            self.release = asyncio.Event()

        async def append(self, partition: int, batch: bytes, timeout_ms: int) -> int:
            await self.release.wait()
            return await super().append(partition, batch, timeout_ms)

    async def scenario() -> dict[str, int]:
        offsets = HeldAppends(tmp_path / "__consumer_offsets-0")
        coord = GroupCoordinator(offsets, settings)
        got = {"loading": coord.heartbeat("g", 1, "m", None)}
        await coord._loading[0][1]
        offsets.release.set()
        joined = await coord.join("g", "", None, "c", "/h", 10000, 10000, "consumer",
                                  [("range", b"m")], require_known_member_id=False)
        assert joined.error == errors.NONE
        code, _ = await coord.sync("g", joined.generation, joined.member_id, None, None, None,
                                   {joined.member_id: b"a"})
        assert code == errors.NONE
        got["stable"] = coord.heartbeat("g", joined.generation, joined.member_id, None)
        assert coord.leave("g", [(joined.member_id, None)]) == (
            errors.NONE, [(joined.member_id, None, errors.NONE)])
        offsets.release.clear()
        deleting = asyncio.ensure_future(coord.delete("g"))
        await asyncio.sleep(0.01)  # the tombstones' append is held: the group is Dead
        got["dead"] = coord.heartbeat("g", joined.generation, joined.member_id, None)
        got["dead leave"] = coord.leave("g", [(joined.member_id, None)])[0]
        offsets.release.set()
        got["deleted"] = await deleting
        got["gone"] = coord.heartbeat("g", joined.generation, joined.member_id, None)
        return got

    assert asyncio.run(scenario()) == {
        "loading": errors.NONE, "stable": errors.NONE,
        "dead": errors.COORDINATOR_NOT_AVAILABLE, "dead leave": errors.COORDINATOR_NOT_AVAILABLE,
        "deleted": errors.NONE, "gone": errors.UNKNOWN_MEMBER_ID}


def test_a_static_leader_back_in_a_stable_group_keeps_the_assignment(tmp_path: Path) -> None:
    """KIP-345/814: a static leader restarted (JoinGroup with its instance id and no
    member id) into a Stable group with the same protocols causes no rebalance. Through
    JoinGroup v9+ it is told it leads, with every member, but to skip its assignor;
    through older versions it is given the old leader's id and no members, so it does
    not run an assignment the Stable group would ignore. A follower back is neither."""
    from daemon.coordinator.coordinator import GroupCoordinator, GroupSettings

    settings = GroupSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000)

    async def scenario() -> list[tuple[str, bool, int, bytes]]:
        coord = GroupCoordinator(LogBackedOffsets(tmp_path / "__consumer_offsets-0"), settings)
        coord._owner("g")
        await coord._loading[0][1]

        def join(instance: str, v9: bool, member_id: str = "") -> Any:
            return coord.join("g", member_id, instance, "c", "/h", 10000, 10000, "consumer",
                              [("range", b"m")], require_known_member_id=True,
                              skip_assignment_supported=v9)

        a = await join("inst-a", True)  # alone: generation 1, its leader
        assert (await coord.sync("g", a.generation, a.member_id, "inst-a", None, None,
                                 {a.member_id: b"A"}))[0] == errors.NONE
        b_joining = asyncio.ensure_future(join("inst-b", True))
        await asyncio.sleep(0.01)
        a = await join("inst-a", True, a.member_id)  # the rebalance b started
        b = await b_joining
        assert a.leader == a.member_id and a.generation == b.generation == 2
        syncs = [coord.sync("g", 2, a.member_id, "inst-a", None, None,
                            {a.member_id: b"A", b.member_id: b"B"}),
                 coord.sync("g", 2, b.member_id, "inst-b", None, None, {})]
        assert [code for code, _ in await asyncio.gather(*syncs)] == [errors.NONE] * 2
        seen = []
        for instance, v9 in (("inst-a", True), ("inst-a", False), ("inst-b", True)):
            before = coord.groups["g"].leader_id
            res = await join(instance, v9)
            assert res.error == errors.NONE and res.generation == 2  # no rebalance
            role = ("self" if res.leader == res.member_id else
                    "previous leader" if res.leader == before else res.leader)
            # Its SyncGroup (no assignments: it skipped or did not lead) gets its own.
            code, assignment = await coord.sync("g", 2, res.member_id, instance, None, None, {})
            assert code == errors.NONE
            seen.append((role, res.skip_assignment, len(res.members), assignment))
        return seen

    assert asyncio.run(scenario()) == [
        ("self", True, 2, b"A"),  # v9: leads, skips its assignor, knows the members
        ("previous leader", False, 0, b"A"),  # v8: not told it leads
        ("previous leader", False, 0, b"B")]  # a follower: the leader is unchanged


def test_offsets_of_a_partition_the_cluster_does_not_have_are_refused_as_in_kafka(
        tmp_path: Path) -> None:
    """An operator's offsets script names a partition past a topic's count and a topic
    that does not exist: Kafka answers each of them UNKNOWN_TOPIC_OR_PARTITION (in
    OffsetCommit, OffsetDelete and TxnOffsetCommit, before the coordinator is asked) and
    keeps no offset of them; the group's real partition is committed. In a cluster the
    coordinator holds none of the topic, so this is the metadata every broker has."""
    with Cluster(tmp_path, brokers=3, dirs=1, extra=GROUP_KEYS) as cl:
        bootstrap = ",".join(d.bootstrap for d in cl.brokers.values())
        ka = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            ka.create_topics([NewTopic("orders", 2, 2)])
            wait_for(lambda: cl.agreed("orders", 2), 30, "orders led on every broker")
            admin = AdminClient({"bootstrap.servers": bootstrap})
            G = ck.ConsumerGroupTopicPartitions
            asked = [ck.TopicPartition("orders", 0, 7), ck.TopicPartition("orders", 5, 7),
                     ck.TopicPartition("ghost", 0, 7)]

            def alter() -> dict[tuple[str, int], int] | None:
                got = admin.alter_consumer_group_offsets([G("ops", asked)])["ops"].result(30)
                errs = {(tp.topic, tp.partition): tp.error.code() if tp.error else 0
                        for tp in got.topic_partitions}
                loading = errs[("orders", 0)] in COORDINATOR_NOT_READY
                return None if loading else errs

            errs = wait_for(alter, 30, "the group's coordinator to load")
            unknown = ck.KafkaError.UNKNOWN_TOPIC_OR_PART
            assert errs == {("orders", 0): 0, ("orders", 5): unknown, ("ghost", 0): unknown}
            assert committed_offsets(bootstrap, "ops") == {("orders", 0): 7}

            deleted = ka.delete_group_offsets("ops", [KTP("orders", 5), KTP("ghost", 0)])
            assert {(tp.topic, tp.partition): e.errno for tp, e in deleted.items()} == {
                ("orders", 5): errors.UNKNOWN_TOPIC_OR_PARTITION,
                ("ghost", 0): errors.UNKNOWN_TOPIC_OR_PARTITION}

            # TxnOffsetCommit, at the group's coordinator: the unknown partitions are
            # refused before the producer is looked at.
            coordinator = wait_for(
                lambda: (r := RawClient(cl.brokers[1].port).request(
                    FindCoordinatorRequest[1](key="ops", key_type=0), 1)).error_code == 0
                and r.node_id, 30, "the group's coordinator")
            T = TxnOffsetCommitRequest[3].TxnOffsetCommitRequestTopic
            P = T.TxnOffsetCommitRequestPartition
            txn = TxnOffsetCommitRequest[3](
                transactional_id="ops-txn", group_id="ops", producer_id=424242,
                producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
                topics=[T(name=n, partitions=[P(partition_index=i, committed_offset=9,
                                                committed_leader_epoch=-1,
                                                committed_metadata="")])
                        for n, i in (("orders", 5), ("ghost", 0))])
            c = RawClient(cl.brokers[coordinator].port)
            try:
                resp = c.request(txn, 3)
            finally:
                c.close()
            assert {(t.name, p.partition_index): p.error_code
                    for t in resp.topics for p in t.partitions} == {
                ("orders", 5): errors.UNKNOWN_TOPIC_OR_PARTITION,
                ("ghost", 0): errors.UNKNOWN_TOPIC_OR_PARTITION}
            assert committed_offsets(bootstrap, "ops") == {("orders", 0): 7}
        finally:
            ka.close()
