"""Controlled shutdown (Kafka's controlled.shutdown.enable): a broker stopped cleanly
first asks the controller to move its partitions' leadership to other in-sync replicas
and to take it out of the ISRs it is in, so a rolling restart leaves no partition
without a leader while its ZooKeeper registration lingers. A real ZooKeeper, three
broker processes, idempotent acks=all producers throughout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka.protocol.metadata import MetadataRequest
from kazoo.client import KazooClient

from daemon.wire import ControlledShutdownRequest

from .cluster_helpers import SESSION_MS, Cluster, wait_for
from .daemon_helpers import RawClient
from .test_replication import (
    assert_every_ack_read_once,
    create,
    full_isr,
    replicas_identical,
    start_producers,
)

NOT_CONTROLLER, BROKER_NOT_AVAILABLE, STALE_BROKER_EPOCH = 41, 8, 77


def partition_states(cl: Cluster, topic: str, partitions: int) -> dict[int, dict[str, Any]]:
    """Each partition's state znode: leader, leader_epoch, isr."""
    zk = KazooClient(hosts=cl.zk.hosts)
    zk.start(15)
    try:
        return {p: json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
                for p in range(partitions)}
    finally:
        zk.stop()
        zk.close()


def controlled_shutdown(port: int, broker_id: int, broker_epoch: int) -> Any:
    c = RawClient(port)
    try:
        return c.request(ControlledShutdownRequest(version=3, broker_id=broker_id,
                                                   broker_epoch=broker_epoch), 3)
    finally:
        c.close()


def broker_epoch(cl: Cluster, broker: int) -> int:
    zk = KazooClient(hosts=cl.zk.hosts)
    zk.start(15)
    try:
        return zk.exists(f"/brokers/ids/{broker}").czxid
    finally:
        zk.stop()
        zk.close()


def restart_each_under_load(cl: Cluster, topic: str, parts: int,
                            while_down: Callable[[int, dict[int, Any], list[Any]], None]
                            = lambda victim, before, loads: None) -> None:
    """Under the idempotent acks=all producers, stop each broker in turn (a controlled
    shutdown that moves every leadership it had; `while_down(victim, the partition
    states before, the loads)` checks more before it starts again) and start it again;
    then every acknowledged record is read back once and the replicas are
    byte-identical."""
    loads = start_producers(cl, topic, parts)
    try:
        for victim in sorted(cl.brokers):
            wait_for(lambda: full_isr(cl, topic, parts), 60, "full ISRs")
            before = partition_states(cl, topic, parts)
            d = cl.brokers[victim]
            assert d.stop() == 0
            assert "controlled shutdown succeeded" in d.stderr(), d.stderr()[-3000:]
            # Written by the controller while the broker was still registered.
            after = partition_states(cl, topic, parts)
            assert all(after[p]["leader"] != victim for p in range(parts)), after
            while_down(victim, before, loads)
            d.start()
        wait_for(lambda: full_isr(cl, topic, parts), 60, "every broker back in the ISRs")
        time.sleep(1)
    finally:
        unanswered = [load.finish() for load in loads]
    assert_every_ack_read_once(cl, topic, parts, loads, unanswered)
    wait_for(lambda: replicas_identical(cl, topic, parts), 60, "replicas byte-identical")


def test_a_rolling_restart_moves_leadership_before_each_broker_stops(tmp_path: Path) -> None:
    """Each broker in turn is stopped (SIGTERM) and started again under acks=all load.
    By the time it has exited, every partition it led has another leader, elected by
    the controller at its request rather than after its registration went away; then it
    leaves every ISR. Afterwards every acknowledged record is read back once and the
    replicas are byte-identical."""
    topic, parts = "roll", 4

    def while_down(victim: int, before: dict[int, Any], loads: list[Any]) -> None:
        led = sorted(p for p, s in before.items() if s["leader"] == victim)
        after = partition_states(cl, topic, parts)
        assert all(after[p]["leader_epoch"] > before[p]["leader_epoch"] for p in led)
        wait_for(lambda: all(victim not in s["isr"] for s in
                             partition_states(cl, topic, parts).values()), 20,
                 f"broker {victim} out of every ISR")
        controller_logs = "".join(cl.brokers[b].stderr() for b in cl.brokers)
        assert (f"controlled shutdown of broker {victim}: leadership of {len(led)} "
                f"partitions moved") in controller_logs
        acked = [len(load.acked) for load in loads]
        wait_for(lambda: all(len(load.acked) > n + 50 for load, n
                             in zip(loads, acked, strict=True)),
                 60, "acks=all writes going on while a broker is down")

    with Cluster(tmp_path, dirs=1) as cl:
        create(cl, topic, parts)
        restart_each_under_load(cl, topic, parts, while_down)


def test_partitions_no_other_replica_can_lead_are_answered_and_the_broker_stops_anyway(
        tmp_path: Path) -> None:
    """A partition whose only in-sync replica is the broker stopping cannot move: the
    controller answers it as remaining, the broker asks controlled.shutdown.max.retries
    times, then stops; with no live in-sync replica left, the partition has no leader
    (unclean election is off)."""
    extra = {"controlled.shutdown.max.retries": 2}
    with Cluster(tmp_path, dirs=1, extra=extra) as cl:
        create(cl, "solo", 1, min_isr=1, assignment=[[2, 3]])
        cl.brokers[3].kill()
        wait_for(lambda: partition_states(cl, "solo", 1)[0]["isr"] == [2],
                 SESSION_MS / 1000 + 20, "the ISR down to broker 2")
        assert cl.brokers[2].stop() == 0
        err = cl.brokers[2].stderr()
        assert "controlled shutdown attempt 1 of 2: 1 partitions still led here" in err, err[-3000:]
        assert "solo-0" in err
        assert "controlled shutdown did not complete after 2 attempts" in err
        wait_for(lambda: partition_states(cl, "solo", 1)[0]["leader"] == -1, 20,
                 "solo-0 without a leader once broker 2 is gone")


def test_the_controlled_shutdown_request_is_checked(tmp_path: Path) -> None:
    """Kafka's answers: NOT_CONTROLLER from another broker, BROKER_NOT_AVAILABLE for a
    broker not registered, STALE_BROKER_EPOCH for an epoch before the broker's; a
    partition of one replica is never moved (nor answered as remaining)."""
    with Cluster(tmp_path, dirs=1) as cl:
        create(cl, "one", 1, min_isr=1, assignment=[[1]])
        ctl = cl.controller()
        other = next(b for b in cl.brokers if b != ctl)
        epoch = broker_epoch(cl, other)
        assert controlled_shutdown(cl.brokers[other].port, other, epoch).error_code == \
            NOT_CONTROLLER
        port = cl.brokers[ctl].port
        assert controlled_shutdown(port, 9, 5).error_code == BROKER_NOT_AVAILABLE
        assert controlled_shutdown(port, other, epoch - 1).error_code == STALE_BROKER_EPOCH
        r = controlled_shutdown(port, 1, broker_epoch(cl, 1))
        assert (r.error_code, r.remaining_partitions) == (0, [])
        assert partition_states(cl, "one", 1)[0]["leader"] == 1  # RF 1: it stays
        c = RawClient(port)
        try:
            meta = c.request(MetadataRequest[7](topics=None, allow_auto_topic_creation=False), 7)
        finally:
            c.close()
        assert len(meta.brokers) == 3  # a broker shutting down is still listed
