"""KIP-461 in a running cluster (docs/cluster.md, "Followers"): one partition whose
fetched data a follower cannot take is set aside by that follower's fetcher, and every
other partition on the same fetcher keeps replicating and keeps its ISR membership.

The fault is per partition by nature, not a sick disk (an IO error takes the whole dir
offline by design): broker 1 runs with a lower `message.max.bytes` than the leader,
as during a rolling change of that setting or on a broker whose config was missed, and
a producer writes a record that the leader accepts and broker 1 cannot store. Kafka's
follower refuses such a batch too (UnifiedLog's RecordTooLargeException on the
replication append), and its fetcher marks just that partition failed (KIP-461's
"unexpected error"); that is what is checked here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import confluent_kafka as ck
from kazoo.client import KazooClient

from daemon.cluster import znodes
from daemon.wire import views

from .cluster_helpers import Cluster, IsrWatch, wait_for
from .daemon_helpers import RawClient, write_config
from .sick_helpers import metric
from .test_replication import (
    assert_every_ack_read_once,
    create,
    partition_bytes,
    produce_acks1,
    start_producers,
)

FAILED = "kafka_server_replicafetchermanager_failedpartitionscount"
SMALL_LIMIT = 64 << 10


def failed_count(cl: Cluster, broker: int) -> float | None:
    return metric(cl.brokers[broker], FAILED, clientId="Replica")


def warnings_for(cl: Cluster, broker: int, tp: str) -> list[str]:
    return [line for line in cl.brokers[broker].stderr().splitlines()
            if f"{tp}: fetching from broker" in line and "failed partition" in line]


def test_a_partition_its_follower_cannot_take_is_set_aside_and_the_others_keep_their_isr(
        tmp_path: Path) -> None:
    """Broker 2 leads t-0, t-1 and t-2 (RF 3, min.insync.replicas 2), so broker 1
    replicates all three on one fetcher; broker 1's message.max.bytes is 64 KiB, the
    others' 1 MiB. Under idempotent acks=all load of both clients on t, a 200 KB record
    goes to t-0 (acks=1, which broker 2 accepts). Broker 1's fetcher sets t-0 aside:
    FailedPartitionsCount goes 0 -> 1, the reason (the record too large) is logged once
    and never retried in a loop, and broker 2 drops broker 1 from t-0's ISR by itself
    (the leader epoch stays). Throughout, t-1 and t-2 keep broker 1 in their ISR on
    every broker and keep replicating to it (its copies end byte-identical to the
    leader's), and every acknowledged record is read back once.

    Then the mark clears as KIP-461 says: broker 2 is killed, t-0 gets a new leader at
    a higher leader epoch, and broker 1 fetches t-0 again (from the new leader) and,
    the record being still too large, sets it aside a second time, once; a StopReplica
    (the topic's deletion) clears it: FailedPartitionsCount is 0."""
    extra = {"replica.lag.time.max.ms": 6000}
    cl = Cluster(tmp_path, extra=extra)
    try:
        b1 = cl.brokers[1]
        b1.values["message.max.bytes"] = SMALL_LIMIT
        write_config(b1.config, b1.values)
        cl.start()
        create(cl, "t", 3, assignment=[[2, 1, 3], [2, 3, 1], [2, 1, 3]])
        assert failed_count(cl, 1) == 0
        loads = start_producers(cl, "t", 3)
        watch = IsrWatch(cl, "t", [1, 2], [1, 2, 3])
        try:
            wait_for(lambda: all(len(x.acked) > 100 for x in loads), 60, "load running")
            t0_epoch = cl.metadata(2, ["t"])["partitions"][("t", 0)][1]
            c = RawClient(cl.brokers[2].port)
            try:
                assert produce_acks1(c, "t", [b"B" * 200_000])[0] == 0
            finally:
                c.close()
            wait_for(lambda: failed_count(cl, 1) == 1, 30, "t-0 set aside on broker 1")
            wait_for(lambda: all(sorted(cl.metadata(b, ["t"])["partitions"][("t", 0)][3])
                                 == [2, 3] for b in cl.brokers), 40,
                     "broker 1 out of t-0's ISR, the leader's doing")
            assert cl.metadata(2, ["t"])["partitions"][("t", 0)][1] == t0_epoch
            before = [len(x.acked) for x in loads]
            wait_for(lambda: all(len(x.acked) > n + 100 for x, n in zip(loads, before, strict=True)),
                     60, "acks=all writes go on (t-0 with the ISR it has left)")
            time.sleep(2)  # ample time for a retry loop to show itself
        finally:
            unanswered = [x.finish() for x in loads]
            watch.stop()
        assert watch.samples > 10 and not watch.bad, \
            f"t-1/t-2 ISR left [1, 2, 3] ({watch.samples} samples): {watch.bad[:5]}"
        warned = warnings_for(cl, 1, "t-0")
        assert len(warned) == 1 and "broker 2" in warned[0] and "RecordTooLarge" in warned[0], warned
        assert failed_count(cl, 1) == 1
        assert all(st == "online" for st in b1.log_dir_states().values())
        assert_every_ack_read_once(cl, "t", 3, loads, unanswered)
        for p in (1, 2):
            wait_for(lambda p=p: partition_bytes(cl, 1, "t", p) == partition_bytes(cl, 2, "t", p),
                     30, f"broker 1's t-{p} identical to the leader's")
        # A higher leader epoch clears the mark: t-0 is fetched again, from the new
        # leader, and set aside again (once) since the record is still too large.
        cl.brokers[2].kill()
        wait_for(lambda: cl.metadata(3, ["t"])["partitions"][("t", 0)][0] == 3, 30,
                 "broker 3 leads t-0")
        assert cl.metadata(3, ["t"])["partitions"][("t", 0)][1] > t0_epoch
        wait_for(lambda: len(warnings_for(cl, 1, "t-0")) == 2, 30, "t-0 fetched again")
        assert "broker 3" in warnings_for(cl, 1, "t-0")[1]
        # Broker 2's death also moved other partitions (__consumer_offsets ones broker 3
        # leads, broker 2's removal from their ISR bumping their leader epoch): a fetch of
        # broker 1's at the old epoch that reaches broker 3 before broker 1's own
        # LeaderAndIsr is fenced and set aside until that arrives (Kafka's
        # onPartitionFenced), so the count may pass through more than 1 on the way.
        wait_for(lambda: failed_count(cl, 1) == 1, 30, "only t-0 left set aside")
        time.sleep(2)
        assert len(warnings_for(cl, 1, "t-0")) == 2  # not retried in a loop
        # StopReplica clears it: the topic is deleted.
        import confluent_kafka.admin as ck_admin

        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[cl.controller()].bootstrap})
        a.delete_topics(["t"], operation_timeout=30, request_timeout=60)
        wait_for(lambda: failed_count(cl, 1) == 0, 30, "the mark cleared by StopReplica")
        assert cl.alive() == [1, 3]
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
            warned = warnings_for(cl, b, "f-0")
            assert len(warned) == 1 and f"fenced epoch {epoch}" in warned[0], warned
            assert failed_count(cl, b) == 1
        for b in (1, 3):
            tell(b)
        for b in (1, 3):
            wait_for(lambda b=b: failed_count(cl, b) == 0, 30, f"the mark cleared on broker {b}")
            wait_for(lambda b=b: identical(b, 0), 30, f"broker {b}'s f-0 caught up")
            assert len(warnings_for(cl, b, "f-0")) == 1
        assert cl.alive() == [1, 2, 3]
        producers.clear()  # destroyed before its brokers stop
