"""Network partitions for real (tests.netsplit): three brokers, each in a network
namespace of its own, ZooKeeper and the clients in a hub; links cut by dropping every
packet between two ends, as a broken switch port or a firewall does, while every
process keeps running. Kafka 3.9's ZooKeeper mode is the reference: a leader that lost
its ZooKeeper session (a zombie) keeps believing it leads until the new controller
tells it otherwise, but it cannot move its high watermark past what its followers
fetched, nor shrink its ISR (that is a ZooKeeper write), so it acknowledges no acks=all
write it could not replicate; once back it follows the new leader and truncates what
only it had.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.producer import ProduceRequest

from logstore.records import Record, build_batch

from .cluster_helpers import SESSION_MS, Cluster, wait_for
from .daemon_helpers import RawClient
from .faults import in_ci
from .netsplit import NetLab
from .test_replication import (
    assert_every_ack_read_once,
    consume_all,
    create,
    full_isr,
    replicas_identical,
    start_producers,
)


@pytest.fixture(autouse=True)
def _netlab_usable() -> None:
    """Skipped where the lab cannot be built (not root, no ip/nft); a failure in CI,
    which runs as root after setup.sh installed them, as the other real-fault tests."""
    why = NetLab.usable()
    if why is not None:
        if in_ci():
            pytest.fail(f"network namespaces: {why}")
        pytest.skip(f"network namespaces: {why}")

NONE = 0


def produce(d: Any, topic: str, values: list[bytes], *, acks: int,
            timeout_ms: int) -> int:
    """The error code of one produce of `values` (one batch, partition 0) to broker `d`."""
    c = RawClient(d.port, host=d.host, timeout=timeout_ms / 1000 + 20)
    try:
        T = ProduceRequest[8].TopicProduceData
        resp = c.request(ProduceRequest[8](
            transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
                T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=build_batch(
                    [Record(None, v, [], int(time.time() * 1000)) for v in values]))])]), 8)
        return resp.responses[0].partition_responses[0].error_code
    finally:
        c.close()


def leader_of(cl: Cluster, broker: int, topic: str) -> tuple[int, int]:
    """(leader, leader epoch) of `topic`-0 as `broker` answers Metadata."""
    leader, epoch, *_ = cl.metadata(broker, [topic])["partitions"][(topic, 0)]
    return leader, epoch


def test_a_leader_cut_from_zookeeper_acknowledges_nothing_it_cannot_replicate_and_rejoins(
        tmp_path: Path) -> None:
    """The zombie leader. RF 3, min.insync.replicas 2, the idempotent acks=all producers
    writing throughout; the leader of partition 0 loses ZooKeeper (and, as its followers
    leave it for the new leader, everyone else): its session expires, a new leader is
    elected at a higher epoch, and the old one, which still answers clients and still
    thinks it leads, must not acknowledge an acks=all write (it cannot replicate it and
    cannot shrink its ISR in ZooKeeper); an acks=1 write it takes is a tail only it has.
    Healed, it registers again, follows the new leader and truncates that tail: every
    acknowledged record is read back exactly once, the zombie's tail nowhere, and the
    three replicas are byte-identical."""
    topic = "z"
    with NetLab([1, 2, 3]) as lab, Cluster(tmp_path, dirs=1, net=lab) as cl:
        create(cl, topic, 1)
        old, old_epoch = leader_of(cl, 1, topic)
        others = [b for b in cl.brokers if b != old]
        loads = start_producers(cl, topic, 1)
        try:
            wait_for(lambda: all(len(load.acked) > 100 for load in loads), 30, "acks")
            lab.isolate(old)
            wait_for(lambda: all(leader_of(cl, b, topic)[0] in others for b in others),
                     SESSION_MS / 1000 + 30, "a new leader, once the old one's session expired")
            # The zombie still leads in its own eyes, at its old epoch.
            assert leader_of(cl, old, topic) == (old, old_epoch)
            zombie = cl.brokers[old]
            assert produce(zombie, topic, [b"zombie-all"], acks=-1, timeout_ms=3000) != NONE
            assert produce(zombie, topic, [b"zombie-tail"], acks=1, timeout_ms=3000) == NONE
            lab.heal()
            wait_for(lambda: full_isr(cl, topic, 1), 60,
                     lambda: f"the old leader back in the ISR; they see:\n{cl.views()}")
            time.sleep(1)
        finally:
            unanswered = [load.finish() for load in loads]
        assert_every_ack_read_once(cl, topic, 1, loads, unanswered)
        values = {v for _, v in consume_all(cl, topic, 1)[0]}
        assert b"zombie-tail" not in values and b"zombie-all" not in values
        wait_for(lambda: replicas_identical(cl, topic, 1), 60, "replicas byte-identical")


def test_a_leader_cut_from_its_followers_refuses_acks_all_below_min_isr_then_recovers(
        tmp_path: Path) -> None:
    """The leader keeps ZooKeeper but loses both followers: it shrinks the ISR to itself
    in ZooKeeper (no election: it is alive), and acks=all writes are refused with
    NOT_ENOUGH_REPLICAS (19) from then on, none acknowledged with fewer than
    min.insync.replicas copies. Healed, the followers fetch again and rejoin; every
    acknowledged record is read back once and the replicas are byte-identical."""
    topic = "f"
    with NetLab([1, 2, 3]) as lab, Cluster(tmp_path, dirs=1, net=lab,
                                           extra={"replica.lag.time.max.ms": 3000}) as cl:
        create(cl, topic, 1)
        leader, epoch = leader_of(cl, 1, topic)
        loads = start_producers(cl, topic, 1)
        try:
            wait_for(lambda: all(len(load.acked) > 100 for load in loads), 30, "acks")
            for b in cl.brokers:
                if b != leader:
                    lab.cut(leader, b)
            d = cl.brokers[leader]
            tries = iter(range(1000))
            wait_for(lambda: produce(d, topic, [b"lonely-%d" % next(tries)], acks=-1,
                                     timeout_ms=2000) == 19,
                     30, "acks=all refused once the ISR is the leader alone")
            assert leader_of(cl, leader, topic) == (leader, epoch)  # no election
            lab.heal()
            wait_for(lambda: full_isr(cl, topic, 1), 90,
                     lambda: f"the followers back in the ISR; they see:\n{cl.views()}")
            time.sleep(1)
        finally:
            unanswered = [load.finish() for load in loads]
        assert_every_ack_read_once(cl, topic, 1, loads, unanswered)
        wait_for(lambda: replicas_identical(cl, topic, 1), 60, "replicas byte-identical")
