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

import time
from pathlib import Path

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
        assert failed_count(cl, 1) == 1
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
