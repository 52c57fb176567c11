"""The control plane end to end: a real ZooKeeper, three logkeeper broker processes,
real Kafka clients (kafka-python and confluent-kafka). docs/cluster.md.

These tests check who leads, what Metadata says on every broker, what the controller
does on failures, and that followers copy their leader byte for byte; the ISR, the high
watermark and acks=all are tests/test_replication.py's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.protocol.admin import DescribeClusterRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest
from kazoo.client import KazooClient

from daemon.cluster import znodes
from daemon.wire import views
from logstore.checkpoint import read_meta_properties

from .cluster_helpers import SESSION_MS, Cluster, wait_for
from .daemon_helpers import REPO, Daemon, RawClient
from .sick_helpers import produce_raw

NOT_LEADER_OR_FOLLOWER = 6
STALE_CONTROLLER_EPOCH = 11
KAFKA_STORAGE_ERROR = 56
UNKNOWN_LEADER_EPOCH = 75
INVALID_REQUEST = 42
ZERO_UUID = uuid.UUID(int=0)
UNKNOWN_TOPIC_ID = 100


def _admin_create(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        resp = a.create_topics([NewTopic(topic, partitions, rf)], timeout_ms=20000)
        assert all(t[1] == 0 for t in resp.topic_errors) if hasattr(resp, "topic_errors") else True
    finally:
        a.close()


def _topic_ids(port: int, version: int, *, names: list[str] | None = None,
               ids: list[str] | None = None) -> list[tuple[int, str | None, str]]:
    """(error, name, topic id) of each topic a Metadata request at `version` answers,
    asked by `names` or by `ids` (Kafka's base64 form), in the answer's order by name."""
    T = MetadataRequest[version].MetadataRequestTopic
    asked = [T(name=n, topic_id=None) for n in names or ()] + [
        T(name=None, topic_id=znodes.topic_id_from_str(i)) for i in ids or ()]
    c = RawClient(port)
    try:
        resp = c.request(MetadataRequest[version](
            topics=asked, allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False), version)
    finally:
        c.close()
    return sorted(((t.error_code, t.name, znodes.topic_id_to_str(t.topic_id or ZERO_UUID))
                   for t in resp.topics), key=lambda t: (t[1] or "", t[2]))


def _fetch_error(port: int, topic: str, partition: int, version: int = 11) -> int:
    c = RawClient(port)
    try:
        T = FetchRequest[version].FetchTopic
        resp = c.request(FetchRequest[version](
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[T(topic=topic, partitions=[T.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""), version)
        return resp.responses[0].partitions[0].error_code
    finally:
        c.close()


def _list_offsets(port: int, topic: str, partition: int, *, replica_id: int = -1,
                  epoch: int = -1) -> tuple[int, int]:
    """(error code, latest offset) of one partition, asked with ListOffsets v4."""
    c = RawClient(port)
    try:
        T = ListOffsetsRequest[4].ListOffsetsTopic
        resp = c.request(ListOffsetsRequest[4](
            replica_id=replica_id, isolation_level=0, topics=[T(name=topic, partitions=[
                T.ListOffsetsPartition(partition_index=partition, current_leader_epoch=epoch,
                                       timestamp=-1)])]), 4)
        part = resp.topics[0].partitions[0]
        return part.error_code, part.offset
    finally:
        c.close()


def test_topics_through_any_broker_metadata_agrees_and_only_the_leader_takes_writes(
        tmp_path: Path) -> None:
    with Cluster(tmp_path) as cl:
        controller = cl.controller()
        other = next(b for b in cl.brokers if b != controller)
        # kafka-python, bootstrapped on a broker that is not the controller: it must find
        # the controller through Metadata.
        _admin_create(cl.brokers[other].bootstrap, "kp", 2, 3)
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[other].bootstrap})
        for fut in a.create_topics([ck_admin.NewTopic("ck", 3, 3)]).values():
            fut.result(30)
        for topic, n in (("kp", 2), ("ck", 3)):
            meta = wait_for(lambda topic=topic, n=n: cl.agreed(topic, n), 20, f"{topic} agreed")
            assert meta["controller"] == controller
            assert meta["brokers"] == [1, 2, 3]
            for (_, _), (leader, epoch, replicas, isr, offline) in meta["partitions"].items():
                assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3]
                assert leader == replicas[0] and epoch == 0 and offline == []
        # DescribeCluster (what admin clients' describe cluster sends) through a broker
        # that is not the controller: every broker and the controller, as Metadata has
        # them; a KRaft controller endpoint is asked for in vain (114).
        c = RawClient(cl.brokers[other].port)
        desc = c.request(DescribeClusterRequest[1](include_cluster_authorized_operations=True,
                                                   endpoint_type=1), 1)
        assert desc.error_code == 0 and desc.controller_id == controller
        assert sorted((b.broker_id, b.port) for b in desc.brokers) == [
            (b, cl.brokers[b].port) for b in (1, 2, 3)]
        assert c.request(DescribeClusterRequest[1](include_cluster_authorized_operations=False,
                                                   endpoint_type=2), 1).error_code == 114
        c.close()
        # The topic config and assignment are Kafka's znodes.
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:
            assert zc.exists("/config/topics/kp") and zc.exists("/brokers/topics/kp")
            assert json.loads(zc.get("/cluster/id")[0])["id"] == desc.cluster_id
            kp_id = json.loads(zc.get("/brokers/topics/kp")[0])["topic_id"]
        finally:
            zc.stop()
            zc.close()
        # Topic ids (KIP-516): the znode's, from every broker's Metadata v10+, and
        # looked up by from v12, as Kafka's brokers answer.
        for bid, b in cl.brokers.items():
            wait_for(lambda b=b: _topic_ids(b.port, 12, names=["kp"]) == [(0, "kp", kp_id)],
                     20, f"broker {bid}'s metadata to hold kp's id")
            assert _topic_ids(b.port, 10, names=["kp"]) == [(0, "kp", kp_id)]
            assert _topic_ids(b.port, 12, ids=[kp_id, "AAAAAAAAAAAAAAAAAAAAAQ"]) == [
                (UNKNOWN_TOPIC_ID, None, "AAAAAAAAAAAAAAAAAAAAAQ"), (0, "kp", kp_id)]
            assert _topic_ids(b.port, 11, ids=[kp_id]) == [(INVALID_REQUEST, "", kp_id)]
        # librdkafka prints ids in standard base64 (Kafka: URL-safe), so compare the bits.
        got = a.describe_topics(ck.TopicCollection(["kp"]))["kp"].result(30).topic_id
        bits = (got.get_most_significant_bits() % (1 << 64)) << 64 \
            | got.get_least_significant_bits() % (1 << 64)
        assert znodes.topic_id_to_str(uuid.UUID(int=bits)) == kp_id
        (leader, _, replicas, _, _) = cl.agreed("kp", 2)["partitions"][("kp", 0)]
        follower = next(b for b in replicas if b != leader)
        c = RawClient(cl.brokers[leader].port)
        assert produce_raw(c, "kp", 0, [b"a", b"b"]) == (0, 0)
        c.close()
        c = RawClient(cl.brokers[follower].port)
        assert produce_raw(c, "kp", 0, [b"c"])[0] == NOT_LEADER_OR_FOLLOWER
        c.close()
        # A consumer's Fetch below v11 is the leader's alone; from v11 on a follower serves
        # it too (KIP-392: fetching from the closest replica).
        assert _fetch_error(cl.brokers[follower].port, "kp", 0, 10) == NOT_LEADER_OR_FOLLOWER
        assert _fetch_error(cl.brokers[follower].port, "kp", 0) == 0
        assert _fetch_error(cl.brokers[leader].port, "kp", 0) == 0
        # ListOffsets is the leader's alone, whatever the version (Kafka's
        # fetchOnlyFromLeader): a follower's end may lag. Only the debugging id (-2) asks
        # any replica (its own view: the follower may not have the records yet). A leader
        # epoch ahead of the leader's is refused.
        assert _list_offsets(cl.brokers[follower].port, "kp", 0) == (NOT_LEADER_OR_FOLLOWER, -1)
        assert _list_offsets(cl.brokers[follower].port, "kp", 0, replica_id=-2)[0] == 0
        assert _list_offsets(cl.brokers[leader].port, "kp", 0) == (0, 2)
        assert _list_offsets(cl.brokers[leader].port, "kp", 0, epoch=1) == (
            UNKNOWN_LEADER_EPOCH, -1)
        # A second creation of the same topic is refused by the controller.
        a2 = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[controller].bootstrap})
        fut = a2.create_topics([ck_admin.NewTopic("kp", 1, 1)])["kp"]
        try:
            fut.result(30)
            raise AssertionError("creating an existing topic succeeded")
        except Exception as err:  # noqa: BLE001 - confluent raises KafkaException
            assert "TOPIC_ALREADY_EXISTS" in str(err) or "already exists" in str(err)
        # KRaft's metadata log is no topic: the controller refuses it as Kafka's does.
        fut = a2.create_topics([ck_admin.NewTopic("__cluster_metadata", 1, 1)])
        try:
            fut["__cluster_metadata"].result(30)
            raise AssertionError("creating __cluster_metadata succeeded")
        except ck.KafkaException as err:
            assert err.args[0].code() == ck.KafkaError.INVALID_REQUEST, err
            assert "Creation of internal topic __cluster_metadata is prohibited" in str(err)


def test_a_producer_on_a_broker_that_is_not_the_controller_auto_creates_its_topic(
        tmp_path: Path) -> None:
    """auto.create.topics.enable through any broker, as ZooKeeper-mode Kafka's: a broker
    that is not the controller writes the topic's znodes itself (its num.partitions and
    default.replication.factor, no configs of its own) and answers LEADER_NOT_AVAILABLE
    until the controller has elected leaders. A name that collides with a topic's is
    refused with 17 and nothing is written."""
    with Cluster(tmp_path, brokers=2, dirs=1, extra={"num.partitions": 2,
                                                     "default.replication.factor": 2}) as cl:
        other = next(b for b in cl.brokers if b != cl.controller())
        p = ck.Producer({"bootstrap.servers": cl.brokers[other].bootstrap, "acks": "all",
                         "message.timeout.ms": 30000})
        failed: list[object] = []
        for i in range(6):
            p.produce("made_here", b"v%d" % i, partition=i % 2,
                      on_delivery=lambda err, _msg: failed.append(err) if err else None)
        assert p.flush(40) == 0 and failed == []
        meta = wait_for(lambda: cl.agreed("made_here", 2), 20, "made_here agreed")
        assert all(sorted(replicas) == [1, 2] for (_, _, replicas, _, _)
                   in meta["partitions"].values())
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:
            assert zc.get("/config/topics/made_here")[0] == b'{"version":1,"config":{}}'
            c = RawClient(cl.brokers[other].port)
            resp = c.request(MetadataRequest[7](
                topics=[MetadataRequest[7].MetadataRequestTopic(name="made.here")],
                allow_auto_topic_creation=True), 7)
            c.close()
            assert [(t.name, t.error_code) for t in resp.topics] == [("made.here", 17)]
            assert zc.exists("/brokers/topics/made.here") is None
            assert zc.exists("/config/topics/made.here") is None
        finally:
            zc.stop()
            zc.close()


def test_brokers_without_a_broker_id_get_one_from_zookeeper_and_keep_it(tmp_path: Path) -> None:
    """Kafka's default broker.id -1 in ZooKeeper mode: each broker gets reserved.broker.
    max.id plus `/brokers/seqid`'s next version (1001, 1002), its dirs' meta.properties
    keep it, and a restart is the same broker again. A broker.id above the reserved range
    is refused at start-up, as Kafka refuses it."""
    with Cluster(tmp_path, brokers=2, dirs=1, per_broker={1: {"broker.id": -1},
                                                          2: {"broker.id": -1}}) as cl:
        assert sorted(cl.metadata(1)["brokers"]) == [1001, 1002]
        ids = {b: int(read_meta_properties(d.log_dirs[0] / "meta.properties")["broker.id"])
               for b, d in cl.brokers.items()}
        assert sorted(ids.values()) == [1001, 1002]
        assert cl.brokers[1].stop() == 0
        cl.brokers[1].start()
        wait_for(lambda: sorted(cl.metadata(2)["brokers"]) == [1001, 1002], 30,
                 "the restarted broker back under its id")
        assert (f"this is broker {ids[1]}, as its log dirs' meta.properties say"
                in cl.brokers[1].stderr())
        bad = Daemon(tmp_path / "bad", {"broker.id": 1001, "zookeeper.connect": cl.zk.hosts})
        with pytest.raises(RuntimeError, match="not greater than reserved.broker.max.id"):
            bad.start(timeout=20)


def test_killed_leader_loses_leadership_within_the_session_timeout(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cl:
        _admin_create(cl.brokers[1].bootstrap, "t", 1, 3)
        before = wait_for(lambda: cl.agreed("t", 1), 20, "t agreed")["partitions"][("t", 0)]
        leader, epoch = before[0], before[1]
        cl.brokers[leader].kill()
        started = time.monotonic()

        def moved():
            m = cl.agreed("t", 1)
            return m and m["partitions"][("t", 0)][0] not in (leader, -1) and m
        after = wait_for(moved, SESSION_MS / 1000 + 15, "a new leader")["partitions"][("t", 0)]
        assert time.monotonic() - started < SESSION_MS / 1000 + 15
        # At least one election; two when the killed leader was the controller too (the
        # new controller's failover election, then its broker-failure handling): noted on
        # the issue to trim, Kafka elects once there.
        assert epoch < after[1] <= epoch + 2 and leader not in after[3]
        c = RawClient(cl.brokers[after[0]].port)
        assert produce_raw(c, "t", 0, [b"x"])[0] == 0
        c.close()


def test_controller_failover_and_a_paused_zombie_is_fenced(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cl:
        first = cl.controller()
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:
            epoch1 = int(zc.get("/controller_epoch")[0])
            cl.brokers[first].kill()
            # At once, while every broker still names the killed controller: the command
            # looks it up again until the new one answers (Kafka's admin clients retry
            # until their API timeout), instead of failing on the refused connection.
            other = next(b for b in cl.brokers if b != first)
            made = subprocess.run(
                [sys.executable, "-m", "daemon.cli", "topics", "create", "--bootstrap-server",
                 cl.brokers[other].bootstrap, "--topic", "during", "--partitions", "1",
                 "--replication-factor", "2"], cwd=REPO, capture_output=True, text=True,
                timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
            assert made.returncode == 0, made.stderr
            second = wait_for(lambda: (c := cl.controller()) not in (first, -1) and c, 30,
                              "a new controller")
            assert int(zc.get("/controller_epoch")[0]) == epoch1 + 1
            # kafka-python's admin client gives up on ECONNREFUSED from a broker that
            # Metadata still lists: wait for the new controller's UpdateMetadata to drop it.
            wait_for(lambda: first not in cl.metadata(second)["brokers"], 30,
                     "the killed broker gone from the metadata")
            _admin_create(cl.brokers[second].bootstrap, "after", 1, 2)
            wait_for(lambda: cl.agreed("after", 1), 20, "after agreed")

            # Pause the new controller past its session: the third broker takes over.
            cl.brokers[second].proc.send_signal(signal.SIGSTOP)
            third = next(b for b in cl.alive() if b not in (first, second))
            wait_for(lambda: cl.metadata(third)["controller"] == third, 30, "third controller")
            epoch3 = int(zc.get("/controller_epoch")[0])
            assert epoch3 == epoch1 + 2
            # A request from the zombie's epoch is refused once a broker has seen the newer
            # one (the new controller's first UpdateMetadata; under load it can trail the
            # election a little). The probe names a partition this broker does not hold,
            # so if it arrives first it changes nothing.
            c = RawClient(cl.brokers[third].port)
            req = views.leader_and_isr_request(
                4, controller_id=second, controller_epoch=epoch1 + 1, broker_epoch=-1,
                partitions=[views.LeaderAndIsrPartition("zombie-probe", 0, epoch1 + 1, second,
                                                        99, (second,), 0, (second,))],
                live_leaders=[])
            wait_for(lambda: c.request(req, 4).error_code == STALE_CONTROLLER_EPOCH, 30,
                     "the zombie's epoch to be refused")
            c.close()
            cl.brokers[second].proc.send_signal(signal.SIGCONT)
            # The zombie wakes up, finds its session gone, and follows the new controller.
            wait_for(lambda: all(cl.metadata(b)["controller"] == third for b in cl.alive()), 30,
                     "every broker to name the third controller")
            assert int(zc.get("/controller_epoch")[0]) == epoch3
            _admin_create(cl.brokers[second].bootstrap, "later", 1, 2)
            wait_for(lambda: cl.agreed("later", 1), 20, "later agreed")
        finally:
            zc.stop()
            zc.close()


def _restart_and_await_deletion(cl: Cluster, broker: int, topic: str, *,
                                queued: tuple[str, ...]) -> None:
    """With the znodes `queued` still there (the deletion waiting for `broker`), start
    `broker` again and wait until the controller has deleted the topic's znodes, in
    order (topic, config, the deletion mark)."""
    zc = KazooClient(hosts=cl.zk.hosts)
    zc.start(15)
    try:
        assert all(zc.exists(path) for path in queued), queued
        cl.brokers[broker].start()
        wait_for(lambda: not zc.exists(f"/brokers/topics/{topic}")
                 and not zc.exists(f"/config/topics/{topic}")
                 and not zc.exists(f"/admin/delete_topics/{topic}"), 30, "deletion to complete")
    finally:
        zc.stop()
        zc.close()


def test_delete_with_a_broker_down_completes_when_it_returns(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cl:
        _admin_create(cl.brokers[1].bootstrap, "gone", 2, 3)
        wait_for(lambda: cl.agreed("gone", 2), 20, "gone agreed")
        controller = cl.controller()
        down = next(b for b in cl.brokers if b != controller)
        cl.brokers[down].stop()
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[controller].bootstrap})
        fut = a.delete_topics(["gone"], operation_timeout=2)["gone"]
        try:
            fut.result(30)
        except Exception as err:  # noqa: BLE001 - 7 only if the metadata cache still shows
            # the topic after 2 s (a loaded machine); the deletion waits for the broker
            assert "TIMED_OUT" in str(err) or "timed out" in str(err).lower(), err
        _restart_and_await_deletion(cl, down, "gone", queued=("/admin/delete_topics/gone",))
        wait_for(lambda: all("gone" not in {t for t, _ in cl.metadata(b)["partitions"]}
                             for b in cl.brokers), 20, "gone from every broker's metadata")
        for d in cl.brokers.values():
            left = [p for ld in d.log_dirs if ld.is_dir() for p in os.listdir(ld)
                    if p.startswith("gone-")]
            assert left == [], (d.root, left)


def test_delete_with_a_replica_killed_is_answered_once_metadata_drops_the_topic(
        tmp_path: Path) -> None:
    """Kafka's DelayedDeleteTopics: DeleteTopics is answered 0 as soon as the
    controller's metadata cache no longer shows the topic, while the controller keeps
    the deletion queued for the replica on a killed broker. Meanwhile a second
    DeleteTopics answers UNKNOWN_TOPIC_OR_PARTITION and CreateTopics TOPIC_ALREADY_EXISTS
    ("marked for deletion"); the restarted broker gets its StopReplica(delete) and the
    deletion completes. Before, the answer waited for every replica and timed out."""
    with Cluster(tmp_path) as cl:
        controller = cl.controller()
        _admin_create(cl.brokers[controller].bootstrap, "t4", 1, 3)
        wait_for(lambda: cl.agreed("t4", 1), 20, "t4 agreed")
        victim = next(b for b in cl.brokers if b != controller)
        cl.brokers[victim].kill()
        wait_for(lambda: victim not in cl.metadata(controller)["brokers"], 4 * SESSION_MS / 1000,
                 f"broker {victim}'s session to end")
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[controller].bootstrap})
        began = time.monotonic()
        a.delete_topics(["t4"], operation_timeout=30, request_timeout=60)["t4"].result(60)
        assert time.monotonic() - began < 10
        assert all(("t4", 0) not in cl.metadata(b)["partitions"] for b in cl.alive())

        with pytest.raises(ck.KafkaException) as retried:
            a.delete_topics(["t4"], operation_timeout=30, request_timeout=60)["t4"].result(60)
        assert retried.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART, retried.value
        with pytest.raises(ck.KafkaException) as created:
            a.create_topics([ck_admin.NewTopic("t4", 1, 1)], operation_timeout=10,
                            request_timeout=60)["t4"].result(60)
        assert created.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS, created.value
        assert "marked for deletion" in str(created.value), created.value

        _restart_and_await_deletion(cl, victim, "t4", queued=("/admin/delete_topics/t4",
                                                              "/brokers/topics/t4"))

        def left() -> dict[int, list[str]]:
            return {b: found for b, d in cl.brokers.items()
                    if (found := [p for ld in d.log_dirs if ld.is_dir()
                                  for p in os.listdir(ld) if p.startswith("t4-")])}

        wait_for(lambda: not left(), 20, lambda: f"t4's dirs to go: {left()}")


def test_broker_restarted_with_a_dead_dir_answers_56_and_is_listed_offline(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cl:
        _admin_create(cl.brokers[1].bootstrap, "d", 4, 3)
        meta = wait_for(lambda: cl.agreed("d", 4), 20, "d agreed")
        victim = 3
        d = cl.brokers[victim]
        where = {}
        for ld in d.log_dirs:
            for name in os.listdir(ld):
                if name.startswith("d-"):
                    where[int(name.rsplit("-", 1)[1])] = ld
        assert sorted(where) == [0, 1, 2, 3]
        dead = where[0]
        lost = sorted(p for p, ld in where.items() if ld == dead)
        d.stop()
        shutil.rmtree(dead)
        dead.write_text("this disk is gone")  # the dir cannot be opened: OFFLINE at start
        d.start()

        def offline_listed():
            m = cl.agreed("d", 4)
            return m and all(m["partitions"][("d", p)][4] == [victim] for p in lost) and m
        m = wait_for(offline_listed, 30, "the dead dir's replicas listed offline")
        for p in lost:
            leader, epoch, replicas, isr, offline = m["partitions"][("d", p)]
            assert leader != victim and victim not in isr
        for p in set(range(4)) - set(lost):
            assert m["partitions"][("d", p)][4] == []
        # Nothing was re-created on the good dir (KIP-112's isNew rule).
        good = [ld for ld in d.log_dirs if ld != dead]
        assert not [n for ld in good for n in os.listdir(ld) if n in {f"d-{p}" for p in lost}]
        del meta


def test_dev_cluster_starts_describes_survives_a_killed_broker_and_stops_cleanly(tmp_path: Path) -> None:
    import subprocess
    import sys

    from daemon.tools import zookeeper

    from .daemon_helpers import REPO
    from .test_cli import cli

    if not zookeeper.installed():
        import pytest

        from .faults import in_ci
        if in_ci():
            pytest.fail("ZooKeeper (Debian package zookeeper) is missing; make test installs it")
        pytest.skip("ZooKeeper is not installed here; `make test` installs it")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "dev-cluster", "--brokers", "2",
         "--dirs-per-broker", "1", "--base-dir", str(tmp_path / "dev")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        bootstrap = None
        deadline = time.monotonic() + 90
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("bootstrap servers: "):
                bootstrap = line.split(": ", 1)[1].strip()
                break
        assert bootstrap, "".join(lines) + proc.stderr.read() if proc.poll() is not None else lines
        assert len(bootstrap.split(",")) == 2
        zk_port = int(lines[0].split(":")[2].split()[0])
        # Created with the command, through the broker that is not the controller
        # (the command finds it), with no replication factor: the dev cluster's
        # default.replication.factor puts a replica on each broker.
        a = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
        controller = wait_for(lambda: a.list_topics(timeout=10).controller_id in (1, 2)
                              and a.list_topics(timeout=10).controller_id, 30, "a controller")
        other = bootstrap.split(",")[2 - controller]  # broker 1 first, then broker 2
        created = cli("topics", "create", "--bootstrap-server", other, "--topic", "dev",
                      "--partitions", "2")
        assert (created.returncode, created.stdout) == (0, "Created topic dev.\n"), created.stderr

        def described():
            out = cli("topics", "describe", "--bootstrap-server", bootstrap, "--topic", "dev")
            return out.returncode == 0 and "Leader: none" not in out.stdout and out.stdout
        out = wait_for(described, 20, "topics describe")
        assert re.search(r"Topic: dev\tTopicId: [\w-]{22}\tPartitionCount: 2\t"
                         r"ReplicationFactor: 2", out)
        for p in (0, 1):
            line = next(x for x in out.splitlines() if f"Partition: {p}\t" in x)
            assert "Replicas: " in line and "Isr: " in line and "Offline: " in line
        # A consumer group works on a dev cluster of two (its offsets topic has 2 replicas).
        import confluent_kafka as ck
        prod = ck.Producer({"bootstrap.servers": bootstrap})
        for i in range(10):
            prod.produce("dev", value=b"%d" % i, partition=i % 2)
        assert prod.flush(30) == 0
        cons = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "dev-app",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
        cons.subscribe(["dev"])
        read = []
        deadline = time.monotonic() + 60
        while len(read) < 10 and time.monotonic() < deadline:
            m = cons.poll(0.2)
            if m is not None and not m.error():
                read.append(m.value())
        assert sorted(read) == sorted(b"%d" % i for i in range(10))
        cons.commit(asynchronous=False)
        committed = cons.committed([ck.TopicPartition("dev", 0), ck.TopicPartition("dev", 1)], 30)
        assert [c.offset for c in committed] == [5, 5]
        # Its lag through the command: the group's coordinator and each partition's
        # leader are found on the brokers that hold them.
        lag = cli("groups", "describe", "--bootstrap-server", bootstrap, "--group", "dev-app")
        assert lag.returncode == 0, lag.stderr
        assert [x.split()[:6] for x in lag.stdout.splitlines()[1:]] == [
            ["dev-app", "dev", "0", "5", "5", "0"], ["dev-app", "dev", "1", "5", "5", "0"]]
        cons.close()

        # A broker killed to watch failover: reported, the other keeps serving, and
        # SIGUSR1 brings it back once ZooKeeper has let go of its old session.
        lines_after = _lines_of(proc.stdout)
        broker1 = tmp_path / "dev" / "broker1"
        pid = int(subprocess.check_output(["pgrep", "-f", f"{broker1}/server.properties"]).split()[0])
        os.kill(pid, signal.SIGKILL)
        said = lines_after(lambda x: x.startswith("broker 1 "), 10)
        assert "was killed by SIGKILL" in said and "Still serving: broker 2" in said, said
        assert f"kill -USR1 {proc.pid}" in said, said
        assert proc.poll() is None, "dev-cluster stopped when one broker died"
        broker2 = ck_admin.AdminClient({"bootstrap.servers": bootstrap.split(",")[1]})
        assert 2 in broker2.list_topics(timeout=10).brokers

        def partitions(which: str) -> list[str]:
            out = cli("topics", "describe", "--bootstrap-server", bootstrap.split(",")[1],
                      "--topic", "dev", which)
            assert out.returncode == 0, out.stderr
            return [x.split("\t")[2] for x in out.stdout.splitlines()]
        # What an operator asks while a broker is down: both partitions have lost a
        # replica from their ISR, none is without a leader (broker 2 leads both), and the
        # ISR of one is at the default min.insync.replicas of 1.
        wait_for(lambda: partitions("--under-replicated-partitions") == [
            "Partition: 0", "Partition: 1"], 30, "both partitions under-replicated")
        assert partitions("--unavailable-partitions") == []
        assert partitions("--under-min-isr-partitions") == []
        assert partitions("--at-min-isr-partitions") == ["Partition: 0", "Partition: 1"]
        proc.send_signal(signal.SIGUSR1)
        said = lines_after(lambda x: x.startswith("broker 1: serving again"), 60)
        assert bootstrap.split(",")[0] in said
        wait_for(lambda: set(broker2.list_topics(timeout=10).brokers) == {1, 2}, 30,
                 "broker 1 registered again")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0, proc.stderr.read()
        assert not zookeeper.ruok(zk_port)
        for b in (1, 2):
            assert "stopped cleanly" in (tmp_path / "dev" / f"broker{b}" / "logkeeper.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _lines_of(stream):  # noqa: ANN001, ANN202
    """A reader of `stream`'s lines on a thread: `wanted(pred, timeout)` gives the first
    line matching `pred`, failing with what was said when none comes in time."""
    import queue
    import threading
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in stream], daemon=True).start()

    def wanted(pred, timeout: float) -> str:  # noqa: ANN001
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            seen.append(line)
            if pred(line):
                return line
        raise AssertionError(f"not said within {timeout} s; said: {''.join(seen)!r}")
    return wanted


def _partition_bytes(d, topic: str, partition: int) -> bytes | None:  # noqa: ANN001
    """The .log bytes of one partition on one broker (whichever of its dirs holds it)."""
    for ld in d.log_dirs:
        pdir = ld / f"{topic}-{partition}"
        if pdir.is_dir():
            return b"".join(f.read_bytes() for f in sorted(pdir.glob("*.log")))
    return None


def test_followers_replicate_the_leaders_log_byte_for_byte(tmp_path: Path) -> None:
    """RF=3: after LeaderAndIsr makes them followers, both fetch from the leader (Fetch
    v12 with their replica id) and hold byte-identical logs, new data included; a new
    leader after the old one is killed has what the followers had copied."""
    import confluent_kafka as ck

    with Cluster(tmp_path) as cl:
        _admin_create(cl.brokers[1].bootstrap, "r", 2, 3)
        meta = wait_for(lambda: cl.agreed("r", 2), 20, "r agreed")

        def produce(n: int, start: int) -> None:
            p = ck.Producer({"bootstrap.servers": cl.brokers[1].bootstrap, "acks": "1",
                             "linger.ms": 2})
            for i in range(start, start + n):
                p.produce("r", value=b"v%05d" % i * (1 + i % 5), partition=i % 2)
            assert p.flush(60) == 0

        def identical() -> bool:
            for part in (0, 1):
                leader = meta["partitions"][("r", part)][0]
                want = _partition_bytes(cl.brokers[leader], "r", part)
                if not want:
                    return False
                for b in cl.alive():
                    if _partition_bytes(cl.brokers[b], "r", part) != want:
                        return False
            return True

        produce(2000, 0)
        wait_for(identical, 60, "followers byte-identical to the leader")
        produce(1000, 2000)
        wait_for(identical, 60, "followers caught up with new data")
        # The leader of partition 0 dies: the new leader holds the copied records.
        leader = meta["partitions"][("r", 0)][0]
        copied = _partition_bytes(cl.brokers[leader], "r", 0)
        cl.brokers[leader].kill()

        def moved():  # noqa: ANN202
            m = cl.agreed("r", 2)
            return m and m["partitions"][("r", 0)][0] not in (leader, -1) and m
        after = wait_for(moved, SESSION_MS / 1000 + 15, "a new leader")
        new_leader = after["partitions"][("r", 0)][0]
        assert _partition_bytes(cl.brokers[new_leader], "r", 0) == copied


def _producer_ids(port: int, n: int, version: int) -> list[int]:
    client = RawClient(port)
    try:
        got = []
        for _ in range(n):
            body = InitProducerIdRequest[version](transactional_id=None,
                                                  transaction_timeout_ms=60000)
            resp = client.request(body, version)
            assert (resp.error_code, resp.producer_epoch) == (0, 0)
            got.append(resp.producer_id)
        return got
    finally:
        client.close()


def test_every_broker_names_the_cluster_id_zookeeper_holds_and_producer_ids_are_unique(
        tmp_path: Path) -> None:
    """/cluster/id (Kafka's ClusterIdZNode) is created by the first broker; every broker
    writes it into its dirs' meta.properties and answers it in Metadata; a broker whose
    dirs belong to another cluster refuses to start, naming both ids.

    InitProducerId hands out ids no other broker hands out, from blocks each broker
    claims in /latest_producer_id_block (Kafka's JSON): two idempotent producers that
    asked different brokers never share an id (they did when every broker counted from
    the second it started), and a restarted broker claims a new block."""
    import json

    with Cluster(tmp_path, dirs=1) as cl:
        ids = {b: _producer_ids(d.port, 3, 0 if b == 1 else 4) for b, d in cl.brokers.items()}
        every = [pid for got in ids.values() for pid in got]
        assert len(set(every)) == len(every), ids
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start()
        try:
            data = json.loads(zc.get("/cluster/id")[0])
            block = json.loads(zc.get("/latest_producer_id_block")[0])
            assert block["version"] == 1 and block["broker"] in cl.brokers
            assert int(block["block_end"]) - int(block["block_start"]) == 999
            assert max(every) <= int(block["block_end"])
            cl.brokers[2].stop()
            cl.brokers[2].start()
            again = _producer_ids(cl.brokers[2].port, 1, 3)
            assert again[0] not in every
            assert json.loads(zc.get("/latest_producer_id_block")[0])["broker"] == 2
        finally:
            zc.stop()
            zc.close()
        assert data["version"] == "1"
        cid = data["id"]
        assert {cl.metadata(b)["cluster_id"] for b in cl.brokers} == {cid}
        for d in cl.brokers.values():
            meta = (d.log_dirs[0] / "meta.properties").read_text()
            assert f"cluster.id={cid}" in meta.splitlines()
        # Broker 3's dir now claims another cluster: it does not start.
        d3 = cl.brokers[3]
        d3.stop()
        path = d3.log_dirs[0] / "meta.properties"
        path.write_text(path.read_text().replace(cid, "AAAAAAAAAAAAAAAAAAAAAA"))
        try:
            d3.start()
        except RuntimeError as err:
            assert "cluster.id" in str(err) and cid in str(err)
        else:
            raise AssertionError("a broker with another cluster's dir started")


def test_a_cluster_whose_broker_cannot_start_leaves_nothing_running(tmp_path: Path) -> None:
    """The harness's own clean-up: a broker that exits during start-up (a bad config)
    fails the `with` at once, and the ZooKeeper server and the brokers already up are
    stopped, not left running for the rest of the suite."""
    cl = Cluster(tmp_path, brokers=2, dirs=1, extra={"num.partitions": 0})
    zk = cl.zk.proc
    assert zk is not None and zk.poll() is None
    with pytest.raises(RuntimeError, match="during start-up"):
        with cl:
            pass
    assert zk.wait(10) is not None
    assert all(d.proc is None or d.proc.poll() is not None for d in cl.brokers.values())
