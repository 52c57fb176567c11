"""Topic configs across a real cluster (a ZooKeeper server, three broker processes):
stored where ZooKeeper-mode Kafka stores them (`/config/topics/<t>`, announced under
`/config/changes`), changed at runtime through any broker with kafka-python's and
confluent-kafka's admin clients, and applied by every broker without a restart:
min.insync.replicas changes what a leader answers to acks=all, a lowered retention
frees segments on every replica (docs/cluster.md "Topic and broker configs")."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin as ca
import pytest
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient
from kazoo.client import KazooClient

from .cluster_helpers import Cluster, wait_for
from .daemon_helpers import RawClient
from .sick_helpers import produce_raw
from .test_replication import create, isr_of

REPO = Path(__file__).resolve().parent.parent


def describe_on(cl: Cluster, broker: int, topic: str) -> dict[str, str]:
    a = ca.AdminClient({"bootstrap.servers": cl.brokers[broker].bootstrap})
    [f] = a.describe_configs([ca.ConfigResource("topic", topic)]).values()
    return {n: e.value for n, e in f.result(30).items()}


def describe_sources_on(cl: Cluster, broker: int, topic: str) -> dict[str, tuple[str, int]]:
    a = ca.AdminClient({"bootstrap.servers": cl.brokers[broker].bootstrap})
    [f] = a.describe_configs([ca.ConfigResource("topic", topic)]).values()
    return {n: (e.value, e.source) for n, e in f.result(30).items()}


def log_bytes(cl: Cluster, broker: int, topic: str) -> int:
    return sum(p.stat().st_size for ld in cl.brokers[broker].log_dirs
               for p in ld.glob(f"{topic}-0/*.log"))


def test_topic_configs_change_at_runtime_on_every_broker(tmp_path: Path) -> None:
    with Cluster(tmp_path, extra={"log.segment.bytes": 64 * 1024}) as cl:
        meta = create(cl, "c", 1, min_isr=2)
        leader = meta["partitions"][("c", 0)][0]
        followers = [b for b in cl.brokers if b != leader]
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:
            data, _ = zc.get("/config/topics/c")
            assert json.loads(data) == {"version": 1, "config": {"min.insync.replicas": "2"}}
            bad = ca.AdminClient({"bootstrap.servers": cl.brokers[cl.controller()].bootstrap})
            [f] = bad.create_topics([ca.NewTopic("bad", 1, 3, config={
                "retention.ms": "soon"})]).values()
            with pytest.raises(ck.KafkaException, match="INVALID_CONFIG"):
                f.result(30)
            assert not zc.exists("/config/topics/bad") and not zc.exists("/brokers/topics/bad")

            # The cluster's dynamic default, through the command: every broker applies it.
            done = subprocess.run(
                [sys.executable, "-m", "daemon.cli", "configs", "alter", "--bootstrap-server",
                 cl.brokers[leader].bootstrap, "--broker-defaults", "--add-config",
                 "log.retention.bytes=5000000"], cwd=REPO, capture_output=True, text=True,
                timeout=60)
            assert done.returncode == 0, done.stderr
            assert json.loads(zc.get("/config/brokers/<default>")[0]) == {
                "version": 1, "config": {"log.retention.bytes": "5000000"}}
            for b in cl.brokers:
                wait_for(lambda b=b: describe_sources_on(cl, b, "c")["retention.bytes"]
                         == ("5000000", ca.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
                         20, f"broker {b} applies the dynamic default")

            # kafka-python, through a follower: the leader learns it from the notification.
            a = KafkaAdminClient(bootstrap_servers=cl.brokers[followers[0]].bootstrap)
            try:
                got = a.alter_configs([ConfigResource(
                    ConfigResourceType.TOPIC, "c",
                    configs={"min.insync.replicas": (AlterConfigOp.SET, "3")})])
                assert str(got["topic"]["c"]) == "OK", got
            finally:
                a.close()
            data, _ = zc.get("/config/topics/c")
            assert json.loads(data)["config"] == {"min.insync.replicas": "3"}
            changes = [json.loads(zc.get(f"/config/changes/{n}")[0])
                       for n in zc.get_children("/config/changes")]
            assert {"version": 2, "entity_path": "topics/c"} in changes
            for b in cl.brokers:
                wait_for(lambda b=b: describe_on(cl, b, "c")["min.insync.replicas"] == "3", 20,
                         f"broker {b} applies the change")

            c = RawClient(cl.brokers[leader].port)
            try:
                assert produce_raw(c, "c", 0, [b"three in sync"]) == (0, 0)
                assert cl.brokers[followers[1]].stop() == 0
                wait_for(lambda: isr_of(cl, leader, "c", 0) == sorted([leader, followers[0]]), 30,
                         "the stopped broker out of the ISR")
                # NOT_ENOUGH_REPLICAS. The stopped broker's last fetch, still in flight
                # when the controller's LeaderAndIsr took it out of the ISR, no longer
                # brings it back (tests/test_leader_appends.py has that race alone).
                # Each try on its own connection: a try that times out leaves its
                # answer on the one it used.
                def refused() -> bool:
                    each = RawClient(cl.brokers[leader].port)
                    try:
                        return produce_raw(each, "c", 0, [b"two in sync"])[0] == 19
                    finally:
                        each.close()

                wait_for(refused, 60, "acks=all refused with min.insync.replicas=3 and two in sync")

                # confluent-kafka, through the other follower: back to 2, at once.
                admin = ca.AdminClient({"bootstrap.servers": cl.brokers[followers[0]].bootstrap})
                [f] = admin.incremental_alter_configs([ca.ConfigResource(
                    "topic", "c", incremental_configs=[ca.ConfigEntry(
                        "min.insync.replicas", "2",
                        incremental_operation=ca.AlterConfigOpType.SET)])]).values()
                f.result(30)
                wait_for(lambda: produce_raw(c, "c", 0, [b"two are enough"])[0] == 0, 20,
                         "acks=all accepted with min.insync.replicas=2")
            finally:
                c.close()
        finally:
            zc.stop()
            zc.close()


def test_lowering_retention_frees_segments_on_every_replica(tmp_path: Path) -> None:
    with Cluster(tmp_path, extra={"log.segment.bytes": 64 * 1024}) as cl:
        create(cl, "r", 1, min_isr=1)
        p = ck.Producer({"bootstrap.servers": cl.brokers[1].bootstrap, "acks": "all",
                         "linger.ms": 5, "batch.size": 16384})
        for i in range(3000):
            p.produce("r", value=b"%06d" % i + b"x" * 200, partition=0)
        assert p.flush(60) == 0
        wait_for(lambda: all(log_bytes(cl, b, "r") >= 600_000 for b in cl.brokers), 30,
                 "every replica holds the records")
        a = ca.AdminClient({"bootstrap.servers": cl.brokers[2].bootstrap})
        [f] = a.incremental_alter_configs([ca.ConfigResource(
            "topic", "r", incremental_configs=[ca.ConfigEntry(
                "retention.bytes", "100000",
                incremental_operation=ca.AlterConfigOpType.SET)])]).values()
        f.result(30)
        # Retention runs at once on each broker as the change reaches it (the periodic
        # round is 5 minutes away).
        wait_for(lambda: all(log_bytes(cl, b, "r") <= 100_000 + 64 * 1024 for b in cl.brokers),
                 30, lambda: f"segments freed: {[log_bytes(cl, b, 'r') for b in cl.brokers]}")
        c = ck.Consumer({"bootstrap.servers": cl.brokers[1].bootstrap, "group.id": "g"})
        low, high = c.get_watermark_offsets(ck.TopicPartition("r", 0), timeout=10)
        c.close()
        assert high == 3000 and low > 0


def test_delete_records_moves_every_replica_and_partitions_are_added(tmp_path: Path) -> None:
    """DeleteRecords on the leader: every replica drops the segments below the new log
    start (followers from their Fetch answers). CreatePartitions through the controller:
    every broker lists the new partitions with a leader, and they take writes."""
    from kafka import TopicPartition as KTP

    with Cluster(tmp_path, extra={"log.segment.bytes": 64 * 1024}) as cl:
        create(cl, "d", 1, min_isr=1)
        p = ck.Producer({"bootstrap.servers": cl.brokers[1].bootstrap, "acks": "all",
                         "linger.ms": 5, "batch.size": 16384})
        for i in range(2000):
            p.produce("d", value=b"%06d" % i + b"x" * 200, partition=0)
        assert p.flush(60) == 0
        wait_for(lambda: all(log_bytes(cl, b, "d") >= 400_000 for b in cl.brokers), 30,
                 "every replica holds the records")
        a = KafkaAdminClient(bootstrap_servers=cl.brokers[1].bootstrap)
        try:
            got = a.delete_records({KTP("d", 0): 1800})
            assert got[KTP("d", 0)]["low_watermark"] == 1800, got
        finally:
            a.close()
        wait_for(lambda: all(log_bytes(cl, b, "d") <= 200 * 206 + 64 * 1024 for b in cl.brokers),
                 30, lambda: f"segments below 1800 gone: {[log_bytes(cl, b, 'd') for b in cl.brokers]}")
        c = ck.Consumer({"bootstrap.servers": cl.brokers[2].bootstrap, "group.id": "g"})
        assert c.get_watermark_offsets(ck.TopicPartition("d", 0), timeout=10) == (1800, 2000)

        admin = ca.AdminClient({"bootstrap.servers": cl.brokers[cl.controller()].bootstrap})
        [f] = admin.create_partitions([ca.NewPartitions("d", 3)], request_timeout=30).values()
        f.result(30)
        for b in cl.brokers:
            wait_for(lambda b=b: cl.agreed("d", 3), 30, f"broker {b} lists 3 partitions with leaders")
        parts = cl.agreed("d", 3)["partitions"]
        assert all(len(parts[("d", i)][2]) == 3 for i in range(3))  # the topic's RF
        leader = parts[("d", 2)][0]
        r = RawClient(cl.brokers[leader].port)
        try:
            assert produce_raw(r, "d", 2, [b"in a new partition"]) == (0, 0)
        finally:
            r.close()
        [f] = admin.create_partitions([ca.NewPartitions("d", 2)], request_timeout=30).values()
        try:
            f.result(30)
            raised = None
        except ck.KafkaException as err:
            raised = str(err)
        assert raised is not None and "INVALID_PARTITIONS" in raised
        c.close()


def test_lowering_retention_with_the_command_frees_a_saturated_replica(tmp_path: Path) -> None:
    """Issue #11 section 4 in a cluster: broker 1's dir holding f-0 (it leads it) falls
    under its free-space floor; leadership moves off it. The operator lowers f's
    retention.ms with `logkeeper configs alter`: every replica deletes its expired
    segments, the full one too (it is not served but still retained), its dir returns
    ONLINE by itself and broker 1 rejoins the ISR, no restart."""
    from .test_cluster_disks import create_on, saturable

    with saturable(tmp_path) as (cl, small, dirs):
        b1 = cl.brokers[1]
        a = ca.AdminClient({"bootstrap.servers": cl.brokers[cl.controller()].bootstrap})
        create_on(cl, dirs[0], "f", [[1, 2, 3]], min_isr=1)
        [f] = a.incremental_alter_configs([ca.ConfigResource(
            "topic", "f", incremental_configs=[ca.ConfigEntry(
                "segment.bytes", str(256 * 1024),
                incremental_operation=ca.AlterConfigOpType.SET)])]).values()
        f.result(30)
        c = RawClient(b1.port)
        try:
            for i in range(50):
                assert produce_raw(c, "f", 0, [b"%03d" % i + b"v" * 100_000]) == (0, i)
        finally:
            c.close()
        wait_for(lambda: all(log_bytes(cl, b, "f") >= 5_000_000 for b in cl.brokers), 30,
                 "replicated")
        (small / "ballast").write_bytes(b"\0" * (5 << 20))
        wait_for(lambda: b1.log_dir_states()[str(dirs[0])] == "saturated", 10, "SATURATED")
        wait_for(lambda: cl.metadata(2, ["f"])["partitions"][("f", 0)][0] not in (1, -1), 20,
                 "leadership off the saturated dir")
        time.sleep(1.1)  # every record is older than the retention about to be set
        done = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "configs", "alter", "--config",
             str(b1.config), "--topic", "f", "--add-config", "retention.ms=1000"],
            cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        wait_for(lambda: all(log_bytes(cl, b, "f") == 0 for b in cl.brokers), 30,
                 lambda: f"segments deleted: {[log_bytes(cl, b, 'f') for b in cl.brokers]}")
        wait_for(lambda: b1.log_dir_states()[str(dirs[0])] == "online", 10, "ONLINE again")
        wait_for(lambda: all(sorted(cl.metadata(b, ["f"])["partitions"][("f", 0)][3]) == [1, 2, 3]
                             for b in cl.brokers), 30, "broker 1 back in the ISR")


def test_broker_loggers_are_described_and_set_per_broker_as_kafka_configs_does(
        tmp_path: Path) -> None:
    """kafka-configs.sh --entity-type broker-loggers --entity-name 2 (BROKER_LOGGER, at
    broker 2): its loggers with their effective levels, root first; a level set there
    applies to that broker only (and to the logger's children), DELETE hands the logger
    back to its parent's level; what Kafka refuses is refused and changes nothing."""
    from kafka.protocol.admin import (
        AlterConfigsRequest,
        DescribeConfigsRequest,
        IncrementalAlterConfigsRequest,
    )

    logger = ConfigResourceType.BROKER_LOGGER.value
    with Cluster(tmp_path, brokers=2, dirs=1) as cl:
        def describe(at: int, name: str) -> tuple[int, dict[str, str]]:
            c = RawClient(cl.brokers[at].port)
            try:
                resp = c.request(DescribeConfigsRequest[2](
                    resources=[(logger, name, None)], include_synonyms=True), 2)
            finally:
                c.close()
            [r] = resp.results
            assert all(e.config_source == 6 and not e.read_only for e in r.configs)
            return r.error_code, {e.name: e.value for e in r.configs}

        def alter(at: int, changes: list[tuple[str, int, str | None]],
                  validate_only: bool = False) -> tuple[int, str | None]:
            c = RawClient(cl.brokers[at].port)
            try:
                resp = c.request(IncrementalAlterConfigsRequest[1](
                    resources=[(logger, str(at), changes)], validate_only=validate_only), 1)
            finally:
                c.close()
            [r] = resp.responses
            return r.error_code, r.error_message

        code, before = describe(2, "2")
        assert code == 0
        assert next(iter(before)) == "root" and before["root"] == "INFO"
        assert before["logkeeper.configs"] == "INFO" and before["logkeeper.groups"] == "INFO"
        assert describe(2, "1")[0] == 42 and describe(2, "")[0] == 42

        assert alter(2, [("logkeeper.configs", 0, "DEBUG")], validate_only=True) == (0, None)
        assert describe(2, "2")[1]["logkeeper.configs"] == "INFO"
        assert alter(2, [("logkeeper", 0, "DEBUG"), ("logkeeper.groups", 0, "WARN")]) == (0, None)
        after = describe(2, "2")[1]
        assert (after["logkeeper"], after["logkeeper.configs"], after["logkeeper.groups"],
                after["root"]) == ("DEBUG", "DEBUG", "WARN", "INFO")
        assert describe(1, "1")[1]["logkeeper.configs"] == "INFO"  # broker 1's own
        assert "Updated the log level of logkeeper to DEBUG" in cl.brokers[2].stderr()

        for changes, code, says in [
                ([("no.such.logger", 0, "DEBUG")], 40, "Logger no.such.logger does not exist!"),
                ([("logkeeper", 0, "LOUD")], 40, "Valid log levels are DEBUG, ERROR, FATAL"),
                ([("root", 1, None)], 42, "Removing the log level of the root logger"),
                ([("logkeeper", 2, "INFO")], 42, "APPEND operation is not allowed"),
                ([("logkeeper.groups", 1, None), ("logkeeper", 0, "LOUD")], 40, "LOUD")]:
            got = alter(2, changes)
            assert got[0] == code and says in (got[1] or ""), (changes, got)
        c = RawClient(cl.brokers[2].port)
        try:
            legacy = c.request(AlterConfigsRequest[1](
                resources=[(logger, "2", [("logkeeper", "INFO")])], validate_only=False), 1)
        finally:
            c.close()
        assert legacy.responses[0].error_code == 42
        assert describe(2, "2")[1] == after  # nothing refused changed anything

        assert alter(2, [("logkeeper.groups", 1, None), ("logkeeper", 1, None)]) == (0, None)
        back = describe(2, "2")[1]
        assert back["logkeeper.groups"] == back["logkeeper"] == "INFO"

        # kafka-python's admin client, as a script would ask.
        ka = KafkaAdminClient(bootstrap_servers=cl.brokers[1].bootstrap)
        try:
            ka.alter_configs([ConfigResource("BROKER_LOGGER", "2", configs={
                "logkeeper.groups": (AlterConfigOp.SET, "ERROR")})], raise_on_unknown=False)
            got = ka.describe_configs([ConfigResource("BROKER_LOGGER", "2")],
                                      config_filter="all")
            assert got["broker_logger"]["2"]["logkeeper.groups"]["value"] == "ERROR"
        finally:
            ka.close()
