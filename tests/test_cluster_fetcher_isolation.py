"""KIP-461 in a running cluster (docs/cluster.md, "Followers"): one partition whose
fetched data a follower cannot take is set aside by that follower's fetcher, and every
other partition on the same fetcher keeps replicating; and what a follower must take
although its own settings would refuse it from a producer (a batch over its
max.message.bytes, as Kafka's appendAsFollower since KAFKA-9617).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
from kazoo.client import KazooClient

from daemon.cluster import znodes
from daemon.wire import views

from .cluster_helpers import Cluster, wait_for
from .daemon_helpers import RawClient, write_config
from .sick_helpers import metric
from .test_replication import (
    create,
    partition_bytes,
    produce_acks1,
)

FAILED = "kafka_server_replicafetchermanager_failedpartitionscount"
SMALL_LIMIT = 64 << 10


def failed_count(cl: Cluster, broker: int) -> float | None:
    return metric(cl.brokers[broker], FAILED, clientId="Replica")


def set_aside_lines(cl: Cluster, broker: int, tp: str, level: str) -> list[str]:
    """The lines of `broker`'s log at `level` saying its fetcher set `tp` aside."""
    return [line for line in cl.brokers[broker].stderr().splitlines()
            if f" {level} " in line and f"{tp}: fetching from broker" in line
            and "failed partition" in line]


def warnings_for(cl: Cluster, broker: int, tp: str) -> list[str]:
    """A partition set aside for a fault (a fenced epoch, the ordinary course of an epoch
    change or of this broker's own controlled shutdown, is told at INFO)."""
    return set_aside_lines(cl, broker, tp, "WARNING")


def test_followers_copy_batches_over_their_own_max_message_bytes(tmp_path: Path) -> None:
    """A follower copies every batch its leader accepted, whatever max.message.bytes it
    has now, as Kafka's appendAsFollower (KAFKA-9617): broker 1 runs with a broker
    message.max.bytes of 64 KiB (a rolling change of it, a config missed), and broker 3
    is down while broker 2, the leader, takes a 200 KB record; then the topic's
    max.message.bytes is lowered to 64 KiB and broker 3 comes back behind. Both copy
    the record and stay in (or rejoin) the ISR, byte-identical to the leader, nothing
    set aside (FailedPartitionsCount 0); before, each set the partition aside and left
    it under-replicated for good."""
    cl = Cluster(tmp_path, dirs=1, extra={"replica.lag.time.max.ms": 6000})
    try:
        b1 = cl.brokers[1]
        b1.values["message.max.bytes"] = SMALL_LIMIT
        write_config(b1.config, b1.values)
        cl.start()
        create(cl, "t", 1, min_isr=1, assignment=[[2, 1, 3]])
        cl.brokers[3].stop()
        c = RawClient(cl.brokers[2].port)
        try:
            assert produce_acks1(c, "t", [b"B" * 200_000, b"after"]) == (0, 0)
        finally:
            c.close()
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[2].bootstrap})
        res = ck_admin.ConfigResource("topic", "t", incremental_configs=[ck_admin.ConfigEntry(
            "max.message.bytes", str(SMALL_LIMIT),
            incremental_operation=ck_admin.AlterConfigOpType.SET)])
        a.incremental_alter_configs([res])[res].result(30)
        cl.brokers[3].start()
        for b in (1, 3):
            wait_for(lambda b=b: partition_bytes(cl, b, "t", 0) == partition_bytes(cl, 2, "t", 0),
                     40, lambda b=b: f"broker {b}'s t-0 identical to the leader's; "
                                     f"FailedPartitionsCount {failed_count(cl, b)}")
        wait_for(lambda: all(sorted(cl.metadata(b, ["t"])["partitions"][("t", 0)][3])
                             == [1, 2, 3] for b in cl.brokers), 40, "t-0's ISR full again")
        assert failed_count(cl, 1) == 0 and failed_count(cl, 3) == 0
        assert not warnings_for(cl, 1, "t-0") and not warnings_for(cl, 3, "t-0")
    finally:
        cl.close()


def test_a_follower_fenced_at_its_own_epoch_waits_for_its_leader_and_isr(
        tmp_path: Path) -> None:
    """KIP-461's FENCED_LEADER_EPOCH rule (Kafka's AbstractFetcherThread.onPartitionFenced):
    a follower whose fetch carries the epoch it was told, while the leader has moved on
    to a newer one, sets that partition aside until its own LeaderAndIsr arrives; it
    does not retry it in a loop, and its other partitions keep replicating.

    In a running cluster the controller's LeaderAndIsr to the leader and to the
    followers cross the follower's fetches only by chance, so the test sends them as the
    controller would (its id and epoch), one broker at a time: broker 2 leads f-0 and
    f-1 (RF 3); broker 2 alone is moved to leader epoch E+1 for f-0. Brokers 1 and 3 are
    answered 74 at epoch E: FailedPartitionsCount 1 on each, logged once, and f-0 stops
    growing there while f-1 stays byte-identical to the leader's under new writes. Their
    own LeaderAndIsr at E+1 clears the mark: FailedPartitionsCount 0, and f-0 catches up
    byte-identical."""
    extra = {"replica.lag.time.max.ms": 30000}
    with Cluster(tmp_path, dirs=1, extra=extra) as cl:
        create(cl, "f", 2, min_isr=1, assignment=[[2, 1, 3], [2, 3, 1]])
        producers = [ck.Producer({"bootstrap.servers": cl.brokers[2].bootstrap, "acks": "1",
                                  "linger.ms": 2})]

        def produce(start: int, n: int) -> None:
            for i in range(start, start + n):
                producers[0].produce("f", b"r%06d" % i, partition=i % 2)
            assert producers[0].flush(30) == 0

        def identical(broker: int, p: int) -> bool:
            return partition_bytes(cl, broker, "f", p) == partition_bytes(cl, 2, "f", p)

        produce(0, 400)
        for b in (1, 3):
            wait_for(lambda b=b: identical(b, 0) and identical(b, 1), 30, f"broker {b} caught up")
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:
            controller_epoch = int(zc.get(znodes.CONTROLLER_EPOCH)[0])
            raw, stat = zc.get("/brokers/topics/f/partitions/0/state")
        finally:
            zc.stop()
            zc.close()
        epoch = json.loads(raw)["leader_epoch"]
        ctl = cl.controller()
        leader = views.LiveLeader(2, "127.0.0.1", cl.brokers[2].port)
        moved = views.LeaderAndIsrPartition("f", 0, controller_epoch, 2, epoch + 1, (2, 1, 3),
                                            stat.version, (2, 1, 3))

        def tell(broker: int) -> None:
            c = RawClient(cl.brokers[broker].port)
            try:
                resp = c.request(views.leader_and_isr_request(
                    4, controller_id=ctl, controller_epoch=controller_epoch, broker_epoch=-1,
                    partitions=[moved], live_leaders=[leader]), 4)
            finally:
                c.close()
            assert resp.error_code == 0
            assert views.leader_and_isr_errors(resp) == {("f", 0): 0}

        tell(2)
        for b in (1, 3):
            wait_for(lambda b=b: failed_count(cl, b) == 1, 30, f"f-0 set aside on broker {b}")
        held = {b: partition_bytes(cl, b, "f", 0) for b in (1, 3)}
        produce(400, 400)
        for b in (1, 3):
            wait_for(lambda b=b: identical(b, 1), 30, f"broker {b}'s f-1 keeps replicating")
        time.sleep(2)  # ample time for a retry loop to show itself
        for b in (1, 3):
            assert partition_bytes(cl, b, "f", 0) == held[b]  # not fetched at the old epoch
            assert not warnings_for(cl, b, "f-0")
            told = set_aside_lines(cl, b, "f-0", "INFO")
            assert len(told) == 1 and f"past our leader epoch {epoch};" in told[0], told
            assert failed_count(cl, b) == 1
        for b in (1, 3):
            tell(b)
        for b in (1, 3):
            wait_for(lambda b=b: failed_count(cl, b) == 0, 30, f"the mark cleared on broker {b}")
            wait_for(lambda b=b: identical(b, 0), 30, f"broker {b}'s f-0 caught up")
            assert len(set_aside_lines(cl, b, "f-0", "INFO")) == 1
        assert cl.alive() == [1, 2, 3]
        producers.clear()  # destroyed before its brokers stop
