"""Leadership back to the preferred replicas once a broker returns (docs/cluster.md
"Preferred leaders"): an operator's ElectLeaders (kafka-leader-election.sh,
AdminClient.elect_leaders) and the controller's own auto leader rebalance.

A real cluster: broker 1 is the preferred replica of two partitions, is killed while
acks=all producers write, and restarted. Its partitions stay led elsewhere until an
election moves them back; acknowledged records are read back exactly once throughout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka import ElectionType
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import ElectLeadersRequest

from .cluster_helpers import Cluster, wait_for
from .daemon_helpers import REPO, RawClient
from .test_replication import controller_gauges

# Broker 1 is preferred for partitions 0 and 1, broker 2 for partition 2.
ASSIGNMENT = [[1, 2, 3], [1, 3, 2], [2, 3, 1]]


def _create(cl: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cl.brokers[2].bootstrap})
    fut = admin.create_topics([NewTopic("pl", num_partitions=len(ASSIGNMENT),
                                        replica_assignment=ASSIGNMENT,
                                        config={"min.insync.replicas": "2"})])
    fut["pl"].result(30)
    wait_for(lambda: cl.agreed("pl", 3), 30, "pl agreed")


def _produce(cl: Cluster, start: int, count: int) -> None:
    p = ck.Producer({"bootstrap.servers": ",".join(cl.brokers[b].bootstrap for b in cl.alive()),
                     "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    failed: list[object] = []
    for i in range(start, start + count):
        p.produce("pl", value=b"%d" % i, partition=i % 3,
                  on_delivery=lambda err, _m: err and failed.append(err))
    assert p.flush(60) == 0 and not failed, failed


def _consume_all(cl: Cluster, want: int) -> list[int]:
    c = ck.Consumer({"bootstrap.servers": cl.brokers[cl.alive()[0]].bootstrap,
                     "group.id": "pl-check", "enable.auto.commit": False})
    c.assign([ck.TopicPartition("pl", p, ck.OFFSET_BEGINNING) for p in range(3)])
    got: list[int] = []
    try:
        wait_for(lambda: got.extend(int(m.value()) for m in c.consume(100, 0.5)
                                    if not m.error()) or len(got) >= want, 60,
                 lambda: f"{want} records, got {len(got)}")
    finally:
        c.close()
    return sorted(got)


def _leaders(cl: Cluster) -> dict[int, int]:
    m = cl.agreed("pl", 3)
    return {} if m is None else {p: m["partitions"][("pl", p)][0] for p in range(3)}


def _restart_broker_1(cl: Cluster) -> None:
    """Kill broker 1 (leader of 0 and 1), write while it is down, restart it and wait
    until it is back in both partitions' ISR."""
    assert _leaders(cl) == {0: 1, 1: 1, 2: 2}
    cl.brokers[1].kill()
    wait_for(lambda: _leaders(cl).get(0, 1) != 1 and _leaders(cl).get(1, 1) != 1, 30,
             "partitions 0 and 1 led elsewhere")
    _produce(cl, 100, 100)
    wait_for(lambda: cl.metadata(2)["brokers"] == [2, 3], 30, "broker 1's session gone")
    cl.brokers[1].start()

    def back_in_isr() -> bool:
        m = cl.agreed("pl", 3)
        return bool(m) and all(1 in m["partitions"][("pl", p)][3] for p in range(3))
    wait_for(back_in_isr, 60, lambda: f"broker 1 back in the ISRs:\n{cl.views()}")


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica(tmp_path: Path) -> None:
    with Cluster(tmp_path, extra={"auto.leader.rebalance.enable": False}) as cl:
        _create(cl)
        _produce(cl, 0, 100)
        _restart_broker_1(cl)
        moved = _leaders(cl)
        assert moved[0] != 1 and moved[1] != 1 and moved[2] == 2  # no rebalance on its own

        # A broker that is not the controller refuses, changing nothing.
        controller = cl.controller()
        other = next(b for b in cl.alive() if b != controller)
        c = RawClient(cl.brokers[other].port)
        try:
            R = ElectLeadersRequest[1]
            resp = c.request(R(election_type=0, timeout_ms=10000, topic_partitions=[
                R.TopicPartitions(topic="pl", partitions=[0])]), 1)
        finally:
            c.close()
        assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
                for r in resp.replica_election_results] == [("pl", [(0, 41)])]
        c = RawClient(cl.brokers[other].port)
        try:  # every partition asked for: 41 for each it knows, as Kafka answers
            resp = c.request(R(election_type=0, timeout_ms=10000, topic_partitions=None), 1)
        finally:
            c.close()
        assert sorted((r.topic, p.partition_id, p.error_code)
                      for r in resp.replica_election_results for p in r.partition_result) == \
            [("pl", 0, 41), ("pl", 1, 41), ("pl", 2, 41)]
        assert _leaders(cl) == moved

        admin = AdminClient({"bootstrap.servers": cl.brokers[other].bootstrap})
        tps = [ck.TopicPartition("pl", p) for p in range(3)] + [ck.TopicPartition("nope", 0)]
        results = admin.elect_leaders(ElectionType.PREFERRED, tps).result(30)
        codes = {(tp.topic, tp.partition): None if err is None else err.code()
                 for tp, err in results.items()}
        assert codes == {("pl", 0): None, ("pl", 1): None,
                         ("pl", 2): ck.KafkaError.ELECTION_NOT_NEEDED,
                         ("nope", 0): ck.KafkaError.UNKNOWN_TOPIC_OR_PART}, codes
        # Answered once the brokers know: every broker's metadata has the new leaders.
        assert _leaders(cl) == {0: 1, 1: 1, 2: 2}
        # Nothing left to elect: an election of every partition answers nothing.
        assert admin.elect_leaders(ElectionType.PREFERRED, None).result(30) == {}

        _produce(cl, 200, 100)
        assert _consume_all(cl, 300) == list(range(300))


def _topics(cl: Cluster) -> dict[str, int]:
    """Every topic (internal ones too) and its partition count, as Metadata says."""
    meta = AdminClient({"bootstrap.servers": cl.brokers[cl.alive()[0]].bootstrap}) \
        .list_topics(timeout=10)
    return {t: len(m.partitions) for t, m in meta.topics.items()}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_the_leader_election_command_moves_leadership_back(tmp_path: Path) -> None:
    """`logkeeper leader-election` (kafka-leader-election.sh), asked of a broker that is
    not the controller: one partition, a JSON file, then every partition; and
    `logkeeper get-offsets` reading each partition's log end from its leader."""
    with Cluster(tmp_path, extra={"auto.leader.rebalance.enable": False}) as cl:
        _create(cl)
        _produce(cl, 0, 99)
        _restart_broker_1(cl)  # 100 more written while broker 1 was down
        moved = _leaders(cl)
        assert moved[0] != 1 and moved[1] != 1 and moved[2] == 2
        # Kafka's PreferredReplicaImbalanceCount, on the active controller only.
        wait_for(lambda: controller_gauges(cl)["preferredreplicaimbalancecount"] == 2, 20,
                 "two partitions led by other than their preferred replica")
        gauges = controller_gauges(cl)
        assert (gauges["globaltopiccount"], gauges["globalpartitioncount"]) == (
            len(_topics(cl)), sum(_topics(cl).values()))
        other = next(b for b in cl.alive() if b != cl.controller())
        bs = cl.brokers[other].bootstrap
        elect = ["leader-election", "--bootstrap-server", bs, "--election-type", "preferred"]

        one = _cli(*elect, "--topic", "pl", "--partition", "0")
        assert (one.returncode, one.stdout) == (
            0, "Successfully completed leader election (PREFERRED) for partitions pl-0\n"), one.stderr
        assert _leaders(cl) == {0: 1, 1: moved[1], 2: 2}

        plan = tmp_path / "elect.json"
        plan.write_text(json.dumps({"partitions": [{"topic": "pl", "partition": 2},
                                                   {"topic": "pl", "partition": 0}]}))
        noop = _cli(*elect, "--path-to-json-file", str(plan))
        assert (noop.returncode, noop.stdout) == (
            0, "Valid replica already elected for partitions pl-0, pl-2\n"), noop.stderr

        every = _cli(*elect, "--all-topic-partitions")
        assert every.returncode == 0, every.stderr
        done = every.stdout.splitlines()
        assert len(done) == 1 and done[0].startswith(
            "Successfully completed leader election (PREFERRED) for partitions "), every.stdout
        elected = done[0].rsplit("partitions ", 1)[1].split(", ")
        assert "pl-1" in elected and "pl-0" not in elected and "pl-2" not in elected
        assert _leaders(cl) == {0: 1, 1: 1, 2: 2}
        assert controller_gauges(cl)["preferredreplicaimbalancecount"] == 0

        unclean = _cli("leader-election", "--bootstrap-server", bs, "--election-type", "unclean",
                       "--all-topic-partitions")
        assert (unclean.returncode, unclean.stdout) == (0, ""), unclean.stderr

        _produce(cl, 200, 99)
        assert _consume_all(cl, 298) == list(range(99)) + list(range(100, 200)) + \
            list(range(200, 299))
        # Record i went to partition i % 3: 99, 100 and 99 of them.
        ends = _cli("get-offsets", "--bootstrap-server", bs, "--topic", "pl")
        assert (ends.returncode, ends.stdout) == (0, "pl:0:99\npl:1:100\npl:2:99\n"), ends.stderr


def test_the_controller_rebalances_leaders_on_its_own(tmp_path: Path) -> None:
    with Cluster(tmp_path, extra={"leader.imbalance.check.interval.seconds": 1}) as cl:
        _create(cl)
        _produce(cl, 0, 100)
        _restart_broker_1(cl)
        wait_for(lambda: _leaders(cl) == {0: 1, 1: 1, 2: 2}, 30,
                 lambda: f"broker 1 leading 0 and 1 again: {_leaders(cl)}")
        assert "moving 2 partitions back to their preferred replicas" in \
            "".join(d.stderr() for d in cl.brokers.values())
        _produce(cl, 200, 100)
        assert _consume_all(cl, 300) == list(range(300))


def test_get_offsets_waits_out_a_leader_that_died(tmp_path: Path) -> None:
    """A leader killed just before `logkeeper get-offsets` asks: the Metadata still names
    it until its ZooKeeper session ends, and a leader that cannot be reached is looked
    up again (as Kafka's admin client does, for its default.api.timeout.ms), so each
    partition's log end is printed once the controller has moved leadership, not
    "Skip getting offsets". A partition that no live broker holds is asked again only
    for the `default.api.timeout.ms` of `--command-config`, then named."""
    with Cluster(tmp_path, extra={"auto.leader.rebalance.enable": False}) as cl:
        _create(cl)
        admin = AdminClient({"bootstrap.servers": cl.brokers[2].bootstrap})
        admin.create_topics([NewTopic("solo", num_partitions=1, replica_assignment=[[1]])])["solo"].result(30)
        wait_for(lambda: cl.agreed("solo", 1), 30, "solo agreed")
        _produce(cl, 0, 100)
        assert _leaders(cl) == {0: 1, 1: 1, 2: 2}
        cl.brokers[1].kill()
        assert cl.metadata(2, ["pl"])["partitions"][("pl", 0)][0] == 1  # not noticed yet
        ends = _cli("get-offsets", "--bootstrap-server", cl.brokers[2].bootstrap, "--topic", "pl")
        # Record i went to partition i % 3.
        assert (ends.returncode, ends.stdout) == (0, "pl:0:34\npl:1:33\npl:2:33\n"), ends.stderr
        assert _leaders(cl)[0] != 1 and _leaders(cl)[1] != 1

        props = tmp_path / "admin.properties"
        props.write_text("default.api.timeout.ms=1500\n")
        began = time.monotonic()
        gone = _cli("get-offsets", "--bootstrap-server", cl.brokers[2].bootstrap,
                    "--topic", "solo|pl", "--command-config", str(props))
        waited = time.monotonic() - began
        assert gone.returncode == 1 and gone.stdout == "pl:0:34\npl:1:33\npl:2:33\n", gone
        assert gone.stderr.startswith("Skip getting offsets for topic-partition solo-0 due "
                                      "to error: LeaderNotAvailableError"), gone.stderr
        assert 1.5 <= waited < 30, waited  # its 1.5 s, not Kafka's default minute
        props.write_text("default.api.timeout.ms=soon\n")
        bad = _cli("get-offsets", "--bootstrap-server", cl.brokers[2].bootstrap,
                   "--command-config", str(props))
        assert bad.returncode == 2 and "default.api.timeout.ms" in bad.stderr, bad
        assert not bad.stdout
