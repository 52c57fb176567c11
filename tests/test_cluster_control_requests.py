"""A broker's answers to the controller's requests, at the request level, in a running
cluster (docs/cluster.md, "Control messages"): Kafka's StopReplica matrix
(ReplicaManagerTest; case 16 of docs/cluster.md's test plan) and LeaderAndIsr for a
partition whose log cannot be created (case 17, with KIP-112's is_new rule). The requests are sent as
the controller would send them, with its id and epoch, to broker 1 of a real 3-broker
cluster; what is checked is each answer and what it did to the broker's log dirs.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from daemon.wire import views

from .cluster_helpers import Cluster, wait_for
from .daemon_helpers import RawClient
from .sick_helpers import produce_raw, remove_dir
from .test_cluster_disks import create_on, holding_dir
from .test_replication import create

NONE, STALE_CONTROLLER_EPOCH, KAFKA_STORAGE_ERROR = 0, 11, 56
FENCED_LEADER_EPOCH, STALE_BROKER_EPOCH = 74, 77
SR = views.StopReplicaPartition


def test_stop_replica_matrix_and_leader_and_isr_that_cannot_create_a_log(tmp_path: Path) -> None:
    """Broker 1 follows m-0..m-5 (led by broker 2, leader epoch 0) on its dir B; its
    dir A, holding o-0, is removed (OFFLINE). StopReplica to broker 1:
    - a controller epoch older than the newest seen: 11 for the request, nothing done;
      a broker epoch older than its registration: 77, nothing done;
    - o-0, on the offline dir: 56;
    - absent partitions, with and without delete: 0;
    - delete at a newer (1), equal (0), "no check" (-1) and "being deleted" (-2) leader
      epoch: 0, and the replica's files are gone;
    - m-5, moved to leader epoch 5 by a LeaderAndIsr: delete at epoch 3 (older) is 74
      and the files stay; stop without delete at epoch 5 is 0 and the files stay.
    LeaderAndIsr to broker 1 for x-0, which no dir of it holds: is_new=false while dir A
    is offline is 56 and creates nothing (KIP-112); is_new=true with dir B cordoned (no
    dir to create it on) is 56 and creates nothing; uncordoned, 0 and created on B."""
    extra = {"log.dir.probe.interval.ms": 100, "log.dir.probe.timeout.ms": 1000}
    with Cluster(tmp_path, extra=extra) as cl:
        b1 = cl.brokers[1]
        dir_a, dir_b = b1.log_dirs
        create_on(cl, dir_a, "o", [[1, 2, 3]], min_isr=1)
        create_on(cl, dir_b, "m", [[2, 1, 3]] * 6, min_isr=1)
        remove_dir(dir_a)
        wait_for(lambda: b1.log_dir_states()[str(dir_a)] == "offline", 10, "dir A OFFLINE")
        # The controller has dealt with the failure (o-0 led elsewhere, broker 1 listed
        # offline) before the requests below, so its own probe does not cross them.
        wait_for(lambda: all(cl.metadata(b, ["o"])["partitions"][("o", 0)][4] == [1]
                             for b in cl.brokers), 30, "o-0's replica on broker 1 offline")
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:
            epoch = int(zc.get("/controller_epoch")[0])
        finally:
            zc.stop()
            zc.close()
        ctl = cl.controller()
        c = RawClient(b1.port)

        def stop(parts: list[SR], *, controller_epoch: int = epoch,
                 broker_epoch: int = -1) -> tuple[int, dict[tuple[str, int], int]]:
            resp = c.request(views.stop_replica_request(
                3, controller_id=ctl, controller_epoch=controller_epoch,
                broker_epoch=broker_epoch, partitions=parts), 3)
            return resp.error_code, views.stop_replica_errors(resp)

        def lead(p: views.LeaderAndIsrPartition) -> dict[tuple[str, int], int]:
            resp = c.request(views.leader_and_isr_request(
                4, controller_id=ctl, controller_epoch=epoch, broker_epoch=-1,
                partitions=[p], live_leaders=[]), 4)
            assert resp.error_code == NONE
            return views.leader_and_isr_errors(resp)

        def held(p: int) -> bool:
            return holding_dir(b1, "m", p) == dir_b

        try:
            assert all(held(p) for p in range(6))
            # m-5 at leader epoch 5 (broker 2 still leads it).
            assert lead(views.LeaderAndIsrPartition(
                "m", 5, epoch, 2, 5, (2, 1, 3), 0, (2, 1, 3))) == {("m", 5): NONE}
            # Request level: nothing of a refused request is applied.
            assert stop([SR("m", 0, True, -2)], controller_epoch=epoch - 1) == \
                (STALE_CONTROLLER_EPOCH, {})
            assert stop([SR("m", 0, True, -2)], broker_epoch=1) == (STALE_BROKER_EPOCH, {})
            assert held(0)
            # Per partition.
            code, got = stop([
                SR("o", 0, False, -1),
                SR("absent", 0, False, -1), SR("absent", 1, True, -1),
                SR("m", 0, True, 1), SR("m", 1, True, 0), SR("m", 2, True, -1),
                SR("m", 3, True, -2), SR("m", 5, True, 3)])
            assert code == NONE
            assert got == {("o", 0): KAFKA_STORAGE_ERROR,
                           ("absent", 0): NONE, ("absent", 1): NONE,
                           ("m", 0): NONE, ("m", 1): NONE, ("m", 2): NONE, ("m", 3): NONE,
                           ("m", 5): FENCED_LEADER_EPOCH}
            assert [held(p) for p in range(6)] == [False] * 4 + [True, True]
            assert stop([SR("m", 5, False, 5)]) == (NONE, {("m", 5): NONE})
            assert held(5)  # stopped, not deleted
            # LeaderAndIsr for a log this broker cannot or must not create.
            x0 = views.LeaderAndIsrPartition("x", 0, epoch, 1, 0, (1,), 0, (1,))
            assert lead(x0) == {("x", 0): KAFKA_STORAGE_ERROR}
            assert holding_dir(b1, "x", 0) is None
            assert b1.admin("log-dirs/cordon", dir_b)[0] == 200
            try:
                new_x0 = views.LeaderAndIsrPartition("x", 0, epoch, 1, 0, (1,), 0, (1,),
                                                     is_new=True)
                assert lead(new_x0) == {("x", 0): KAFKA_STORAGE_ERROR}
                assert holding_dir(b1, "x", 0) is None
            finally:
                assert b1.admin("log-dirs/uncordon", dir_b)[0] == 200
            assert lead(new_x0) == {("x", 0): NONE}
            assert holding_dir(b1, "x", 0) == dir_b
        finally:
            c.close()
        assert cl.alive() == [1, 2, 3]


def follower_fetch(port: int, replica_id: int, topic: str, partition: int, offset: int,
                   leader_epoch: int, max_wait_ms: int) -> tuple[int, float]:
    """One Fetch v12 as follower `replica_id` would send it: (error code, seconds taken)."""
    from kafka.protocol.consumer import FetchRequest

    F = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=[
            F.FetchPartition(partition=partition, current_leader_epoch=leader_epoch,
                             fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                             partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id="")
    c = RawClient(port)
    c.sock.settimeout(max_wait_ms / 1000 + 30)
    try:
        started = time.monotonic()
        resp = c.request(req, 12)
        return resp.responses[0].partitions[0].error_code, time.monotonic() - started
    finally:
        c.close()


def test_a_fetch_from_before_an_epoch_change_does_not_put_a_dead_follower_back(
        tmp_path: Path) -> None:
    """A dead broker must stay out of the ISR once the controller took it out. Broker 1
    leads h-0 (ISR [1, 2, 3], min.insync.replicas 1); a fetch as follower 3 at leader
    epoch 0 waits at the log end (a long poll, as every idle follower's). Broker 3 is
    killed; the controller takes it out of the ISR at leader epoch 1. The waiting fetch
    answers 74 (FENCED_LEADER_EPOCH) when the LeaderAndIsr is applied, as Kafka checks a
    fetch's epoch at every read, and does not count as follower 3 catching up: the ISR
    stays [1, 2] on every broker and acks=all writes are answered at once.

    Before the fix, the fetch's epoch was checked once when it arrived, and against the
    metadata cache (which the controller's UpdateMetadata moves only after its
    LeaderAndIsr): the late fetch put broker 3 back (ISR [1, 2, 3] with 3 dead) and
    acks=all writes timed out (7) until replica.lag.time.max.ms dropped it again. The
    end-to-end LogDirFailure test (tests/test_cluster_disks.py) met it when the other
    brokers stopped."""
    with Cluster(tmp_path, dirs=1) as cl:
        create(cl, "h", 1, min_isr=1, assignment=[[1, 2, 3]])
        c = RawClient(cl.brokers[1].port)
        try:
            assert produce_raw(c, "h", 0, [b"a", b"b"]) == (0, 0)
        finally:
            c.close()
        got: list[tuple[int, float]] = []
        waiting = threading.Thread(target=lambda: got.append(
            follower_fetch(cl.brokers[1].port, 3, "h", 0, 2, 0, 20000)), daemon=True)
        waiting.start()
        time.sleep(0.5)
        cl.brokers[3].kill()
        waiting.join(60)
        wait_for(lambda: all(cl.metadata(b, ["h"])["partitions"][("h", 0)][3] == [1, 2]
                             for b in (1, 2)), 30, "broker 3 out of h-0's ISR")
        code, took = got[0]
        assert code == FENCED_LEADER_EPOCH, (code, took)
        for _ in range(10):
            for b in (1, 2):
                assert sorted(cl.metadata(b, ["h"])["partitions"][("h", 0)][3]) == [1, 2]
            time.sleep(0.2)
        c = RawClient(cl.brokers[1].port)
        try:
            assert produce_raw(c, "h", 0, [b"c"]) == (0, 2)
        finally:
            c.close()


def _partition_metadata(d: object, topic: str, partition: int) -> str | None:
    where = holding_dir(d, topic, partition)
    f = None if where is None else where / f"{topic}-{partition}" / "partition.metadata"
    return None if f is None or not f.exists() else f.read_text()


def test_replicas_name_their_topic_id_and_leader_and_isr_v5_checks_it(tmp_path: Path) -> None:
    """Every replica's log names its topic's id (the znode's, KIP-516) in
    `partition.metadata`, as Kafka's brokers write it, learnt from the controller's
    UpdateMetadata v7 (its LeaderAndIsr is v4, without ids). A log without one (written
    before topic ids; here its file removed while its broker was down) gets it once its
    broker is back. A LeaderAndIsr v5, as a Kafka controller sends it, naming another id
    for a log that has one (a topic of the same name deleted meanwhile) is answered
    INCONSISTENT_TOPIC_ID and changes nothing."""
    with Cluster(tmp_path) as cl:
        create(cl, "ids", 2)
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:
            topic_id = json.loads(zc.get("/brokers/topics/ids")[0])["topic_id"]
            epoch = int(zc.get("/controller_epoch")[0])
        finally:
            zc.stop()
            zc.close()
        kafkas = f"version: 0\ntopic_id: {topic_id}"
        for b in cl.brokers.values():
            for p in (0, 1):
                assert _partition_metadata(b, "ids", p) == kafkas, (b.port, p)

        b2 = cl.brokers[2]
        b2.stop()
        (holding_dir(b2, "ids", 0) / "ids-0" / "partition.metadata").unlink()
        b2.start()
        wait_for(lambda: _partition_metadata(b2, "ids", 0) == kafkas, 30,
                 "broker 2's ids-0 given its topic id again")

        b1 = cl.brokers[1]
        other = uuid.uuid4()
        state = cl.metadata(1, ["ids"])["partitions"][("ids", 1)]
        leader, leader_epoch, replicas, isr = state[0], state[1], state[2], state[3]
        c = RawClient(b1.port)
        try:
            resp = c.request(views.leader_and_isr_request(
                5, controller_id=cl.controller(), controller_epoch=epoch, broker_epoch=-1,
                partitions=[views.LeaderAndIsrPartition(
                    "ids", 1, epoch, leader, leader_epoch + 5, tuple(isr), 0, tuple(replicas),
                    topic_id=other)], live_leaders=[]), 5)
        finally:
            c.close()
        assert resp.error_code == NONE
        assert views.leader_and_isr_errors(resp, {other: "ids"}) == {("ids", 1): 103}
        assert _partition_metadata(b1, "ids", 1) == kafkas
        assert cl.metadata(1, ["ids"])["partitions"][("ids", 1)][1] == leader_epoch
