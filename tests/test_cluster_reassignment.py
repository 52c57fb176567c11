"""Partition reassignment across brokers (KIP-455; docs/cluster.md "Reassigning
partitions"): kafka-reassign-partitions.sh's job, through kafka-python's
`alter_partition_reassignments` and `list_partition_reassignments` and through
`logkeeper reassign-partitions`.

Real clusters of three brokers under idempotent acks=all load: replicas move to a
broker that had none and leave one that had them; a reassignment outlives a kill -9 of
the controller and a paused target broker; a cancel puts the replicas back, and lets a
topic deletion held back by a reassignment that cannot finish go on. Every
acknowledged record is read back once, the new replicas are byte-identical to the
leader's, and a removed replica's files are gone from its broker's disk.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import kafka.errors as ke
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterPartitionReassignmentsRequest, ListPartitionReassignmentsRequest
from kazoo.client import KazooClient

from .cluster_helpers import SESSION_MS, Cluster, wait_for
from .daemon_helpers import RawClient
from .sick_helpers import create_topic, fill, metric, produce_raw
from .test_cli import cli
from .test_replication import (
    assert_every_ack_read_once,
    consume_all,
    create,
    partition_bytes,
    start_producers,
)


def _znode(cl: Cluster, topic: str) -> dict[str, Any]:
    zk = KazooClient(hosts=cl.zk.hosts)
    zk.start(10)
    try:
        return json.loads(zk.get(f"/brokers/topics/{topic}")[0])
    finally:
        zk.stop()
        zk.close()


def _holders(cl: Cluster, topic: str, partition: int) -> list[int]:
    """The brokers with the partition's directory on one of their disks."""
    return sorted(b for b, d in cl.brokers.items()
                  if any((ld / f"{topic}-{partition}").is_dir() for ld in d.log_dirs))


def _settled(cl: Cluster, topic: str, want: dict[int, list[int]]) -> bool:
    """Every live broker's metadata has each partition on `want` (in order), all in the
    ISR, with a leader among them; ZooKeeper holds no adding or removing replicas."""
    m = cl.agreed(topic, len(want))
    if not m:
        return False
    for p, replicas in want.items():
        leader, _, got, isr, _ = m["partitions"][(topic, p)]
        if got != replicas or sorted(isr) != sorted(replicas) or leader not in replicas:
            return False
    z = _znode(cl, topic)
    return (z["partitions"] == {str(p): r for p, r in want.items()}
            and not z.get("adding_replicas") and not z.get("removing_replicas"))


def _identical(cl: Cluster, topic: str, want: dict[int, list[int]]) -> bool:
    for p, replicas in want.items():
        got = {partition_bytes(cl, b, topic, p) for b in replicas}
        if len(got) != 1 or None in got:
            return False
    return True


def _more_acks(loads: list[Any]) -> None:
    """Every producer gets 200 more records acknowledged: writes go on afterwards."""
    before = [len(load.acked) for load in loads]
    wait_for(lambda: all(len(load.acked) > n + 200 for load, n in zip(loads, before, strict=True)),
             60, "acks after the reassignment")


def _admin(cl: Cluster, broker: int) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cl.brokers[broker].bootstrap, request_timeout_ms=30000)


def test_replicas_move_to_other_brokers_under_load_with_the_command(tmp_path: Path) -> None:
    """Two partitions on brokers 1 and 2 move to [2, 3] and [3, 1] while two idempotent
    acks=all producers write. The leader of partition 0 (broker 1) leaves its replica
    set, so leadership moves. The command's --generate proposes a plan, --execute
    starts it (printing the current assignment for a rollback), --verify says when it
    is done."""
    with Cluster(tmp_path, dirs=1) as cl:
        create(cl, "ra", 2, min_isr=2, assignment=[[1, 2], [1, 2]])
        loads = start_producers(cl, "ra", 2)
        want = {0: [2, 3], 1: [3, 1]}
        try:
            wait_for(lambda: all(len(x.acked) > 300 for x in loads), 60, "load running")
            boot = cl.brokers[2].bootstrap
            gen = cli("reassign-partitions", "--bootstrap-server", boot, "--generate",
                      "--topics", "ra", "--broker-list", "1,2,3")
            assert gen.returncode == 0, gen.stderr
            assert "Current partition replica assignment" in gen.stdout
            proposed = json.loads(gen.stdout.strip().splitlines()[-1])
            assert {(p["topic"], p["partition"]) for p in proposed["partitions"]} == {("ra", 0), ("ra", 1)}
            assert all(len(p["replicas"]) == 2 and set(p["replicas"]) <= {1, 2, 3}
                       for p in proposed["partitions"])

            plan = tmp_path / "plan.json"
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": "ra", "partition": p, "replicas": r} for p, r in want.items()]}))
            run = cli("reassign-partitions", "--bootstrap-server", boot,
                      "--reassignment-json-file", str(plan), "--execute")
            assert run.returncode == 0, run.stderr
            rollback = json.loads(run.stdout.split("Current partition replica assignment")[1]
                                  .strip().splitlines()[0])
            assert sorted((p["partition"], p["replicas"]) for p in rollback["partitions"]) == \
                [(0, [1, 2]), (1, [1, 2])]
            assert "Successfully started partition reassignments for ra-0,ra-1" in run.stdout

            def verified() -> bool:
                v = cli("reassign-partitions", "--bootstrap-server", boot,
                        "--reassignment-json-file", str(plan), "--verify")
                return v.returncode == 0 and "Reassignment of partition ra-1 is completed." in v.stdout
            wait_for(verified, 90, lambda: f"--verify to say done:\n{cl.views()}")
            wait_for(lambda: _settled(cl, "ra", want), 30, "metadata and znode on the new replicas")
            _more_acks(loads)
        finally:
            unanswered = [x.finish() for x in loads]
        assert_every_ack_read_once(cl, "ra", 2, loads, unanswered)
        wait_for(lambda: _identical(cl, "ra", want), 30, "new replicas byte-identical")
        # The removed replicas are deleted: broker 1 left partition 0, broker 2 partition 1.
        wait_for(lambda: _holders(cl, "ra", 0) == [2, 3] and _holders(cl, "ra", 1) == [1, 3], 30,
                 lambda: f"removed replicas deleted: {_holders(cl, 'ra', 0)}, {_holders(cl, 'ra', 1)}")
        listed = cli("reassign-partitions", "--bootstrap-server", boot, "--list")
        assert listed.returncode == 0 and "No partition reassignments found." in listed.stdout, listed


def _plan(tmp_path: Path, topic: str, want: dict[int, list[int]]) -> str:
    plan = tmp_path / f"{topic}-plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for p, r in want.items()]}))
    return str(plan)


def _listed(cl: Cluster, broker: int) -> list[str]:
    """`reassign-partitions --list` through `broker`: its lines after the heading."""
    got = cli("reassign-partitions", "--bootstrap-server", cl.brokers[broker].bootstrap, "--list")
    assert got.returncode == 0, got.stderr
    return got.stdout.strip().splitlines()[1:]


def test_a_reassignment_outlives_the_controller_and_a_paused_target(tmp_path: Path) -> None:
    """The partition moves from [x, controller] to [x, y] while y is paused, so it cannot
    catch up: the reassignment is in progress (listed with its adding and removing
    replicas) when the controller is killed with -9. The new controller lists it from
    ZooKeeper; the old controller's broker restarts as a replica still being removed;
    y resumes, re-registers, catches up, and the reassignment completes: y and x hold
    identical replicas, the old controller's copy is deleted, no ack is lost. (The
    command, not kafka-python's admin client, talks to the cluster while y is paused:
    that client may pick the paused broker for its own metadata and time out.)"""
    with Cluster(tmp_path, dirs=1) as cl:
        ctrl = cl.controller()
        x, y = (b for b in cl.brokers if b != ctrl)
        create(cl, "rb", 1, min_isr=1, assignment=[[x, ctrl]])
        loads = start_producers(cl, "rb", 1)
        want = {0: [x, y]}
        try:
            wait_for(lambda: all(len(x_.acked) > 300 for x_ in loads), 60, "load running")
            cl.brokers[y].proc.send_signal(signal.SIGSTOP)
            try:
                run = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                          "--reassignment-json-file", _plan(tmp_path, "rb", want), "--execute")
                assert run.returncode == 0, run.stderr
                in_progress = [f"rb-0: replicas: {x},{y},{ctrl}. adding: {y}. removing: {ctrl}."]
                assert _listed(cl, x) == in_progress
                shown = cli("topics", "describe", "--bootstrap-server", cl.brokers[x].bootstrap,
                            "--topic", "rb")
                assert "ReplicationFactor: 2\t" in shown.stdout, shown  # its original replicas
                assert f"Replicas: {x},{y},{ctrl}\t" in shown.stdout
                assert f"\tAdding Replicas: {y}\tRemoving Replicas: {ctrl}" in shown.stdout
                # Not under-replicated while a replica is being added (Kafka's rule): the
                # ISR is measured against the original replicas, on the leader and in
                # describe's filter. (x's metadata has the new set only after its
                # LeaderAndIsr, which the controller sends first.)
                assert cl.metadata(x, ["rb"])["partitions"][("rb", 0)][0] == x
                wait_for(lambda: cl.metadata(x, ["rb"])["partitions"][("rb", 0)][2] == [x, y, ctrl], 10,
                         "x's metadata with the new replica set")
                assert metric(cl.brokers[x], "kafka_server_replicamanager_underreplicatedpartitions") == 0
                assert metric(cl.brokers[x], "kafka_server_replicamanager_reassigningpartitions") == 1
                urp = cli("topics", "describe", "--bootstrap-server", cl.brokers[x].bootstrap, "--topic",
                          "rb", "--under-replicated-partitions")
                assert urp.returncode == 0 and urp.stdout.strip() == "", urp
                cl.brokers[ctrl].kill()
                wait_for(lambda: cl.metadata(x)["controller"] == x, SESSION_MS / 1000 + 30,
                         "broker x to be the controller")
                assert _listed(cl, x) == in_progress  # read back from ZooKeeper
                assert _znode(cl, "rb")["adding_replicas"] == {"0": [y]}
                cl.brokers[ctrl].start()
            finally:
                cl.brokers[y].proc.send_signal(signal.SIGCONT)
            wait_for(lambda: _settled(cl, "rb", want), 90,
                     lambda: f"the reassignment to complete:\n{cl.views()}")
            wait_for(lambda: all(metric(cl.brokers[b], "kafka_server_replicamanager_reassigningpartitions")
                                 == 0 for b in cl.alive()), 10, "ReassigningPartitions back to 0")
            _more_acks(loads)
        finally:
            unanswered = [x_.finish() for x_ in loads]
        assert_every_ack_read_once(cl, "rb", 1, loads, unanswered)
        wait_for(lambda: _identical(cl, "rb", want), 30, "replicas byte-identical")
        wait_for(lambda: _holders(cl, "rb", 0) == sorted([x, y]), 30,
                 lambda: f"the old controller's copy deleted: {_holders(cl, 'rb', 0)}")


def test_bad_reassignments_are_refused_and_a_cancel_puts_replicas_back(tmp_path: Path) -> None:
    """Each bad request is refused with Kafka's code and changes nothing; a broker that
    is not the controller answers 41; a cancel of a reassignment held up by a paused
    target broker restores the original replicas, and that broker ends without a copy.
    (Sessions of 30 s here: the paused broker stays registered throughout, so what it
    was sent while paused is delivered in order when it resumes.)"""
    with Cluster(tmp_path, dirs=1, extra={"zookeeper.session.timeout.ms": 30000}) as cl:
        ctrl = cl.controller()
        x, y = (b for b in cl.brokers if b != ctrl)
        create(cl, "rc", 1, min_isr=1, assignment=[[x, ctrl]])
        admin = _admin(cl, x)
        try:
            got = admin.alter_partition_reassignments({
                KTP("rc", 0): [x, 9],  # broker 9 does not exist
                KTP("rc", 5): [x, y],  # no such partition
                KTP("nope", 0): [x, y],
            })
            assert got == {KTP("rc", 0): ke.InvalidReplicationAssignmentError,
                           KTP("rc", 5): ke.UnknownTopicOrPartitionError,
                           KTP("nope", 0): ke.UnknownTopicOrPartitionError}, got
            for bad in ([x, x], [-1, x]):  # (kafka-python refuses [] itself; sent raw below)
                assert admin.alter_partition_reassignments({KTP("rc", 0): bad}) == \
                    {KTP("rc", 0): ke.InvalidReplicationAssignmentError}, bad
            assert admin.alter_partition_reassignments({KTP("rc", 0): None}) == \
                {KTP("rc", 0): ke.NoReassignmentInProgressError}
            assert admin.list_partition_reassignments() == {}
        finally:
            admin.close()
        # v1 may forbid a change of replication factor (KIP-860): 38.
        c = RawClient(cl.brokers[ctrl].port)
        try:
            R = AlterPartitionReassignmentsRequest[1]
            T = R.ReassignableTopic
            resp = c.request(R(timeout_ms=10000, allow_replication_factor_change=False, topics=[
                T(name="rc", partitions=[T.ReassignablePartition(partition_index=0,
                                                                 replicas=[x, y, ctrl])])]), 1)
            assert [(p.partition_index, p.error_code) for t in resp.responses for p in t.partitions] \
                == [(0, ke.InvalidReplicationFactorError.errno)]
            resp = c.request(R(timeout_ms=10000, allow_replication_factor_change=True, topics=[
                T(name="rc", partitions=[T.ReassignablePartition(partition_index=0, replicas=[])])]), 1)
            assert [(p.error_code, p.error_message) for t in resp.responses for p in t.partitions] \
                == [(ke.InvalidReplicationAssignmentError.errno,
                     "Empty replica list specified in partition reassignment.")]
        finally:
            c.close()
        # A broker that is not the controller: 41 for the request, nothing listed.
        c = RawClient(cl.brokers[x].port)
        try:
            resp = c.request(ListPartitionReassignmentsRequest[0](timeout_ms=10000, topics=None), 0)
            assert resp.error_code == ke.NotControllerError.errno
            resp = c.request(R(timeout_ms=10000, allow_replication_factor_change=True, topics=[
                T(name="rc", partitions=[T.ReassignablePartition(partition_index=0,
                                                                 replicas=[x, y])])]), 1)
            assert resp.error_code == ke.NotControllerError.errno
        finally:
            c.close()
        assert _settled(cl, "rc", {0: [x, ctrl]})

        # The command: a refused partition is named with its code, exit 1; a broker
        # not in the cluster is refused by --generate before anything is asked.
        bad = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                  "--reassignment-json-file", _plan(tmp_path, "rc", {0: [x, 9]}), "--execute")
        assert bad.returncode == 1
        assert "rc-0: error 39 (InvalidReplicationAssignmentError): Replica assignment has brokers " \
            "that are not alive" in bad.stderr, bad.stderr
        gen = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                  "--generate", "--topics", "rc", "--broker-list", "1,2,7")
        assert gen.returncode == 2 and "brokers 7 of --broker-list are not in the cluster" in gen.stderr
        assert _settled(cl, "rc", {0: [x, ctrl]})

        cl.brokers[y].proc.send_signal(signal.SIGSTOP)
        try:
            plan = _plan(tmp_path, "rc", {0: [y, x]})
            run = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                      "--reassignment-json-file", plan, "--execute")
            assert run.returncode == 0, run.stderr
            assert _listed(cl, x) == [f"rc-0: replicas: {y},{x},{ctrl}. adding: {y}. removing: {ctrl}."]
            # Another --execute while one runs: refused, as Kafka's, unless --additional.
            again = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                        "--reassignment-json-file", plan, "--execute")
            assert again.returncode == 1 and "Use --additional" in again.stderr, again
            again = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                        "--reassignment-json-file", plan, "--execute", "--additional")
            assert again.returncode == 0, again.stderr
            assert _listed(cl, x) == [f"rc-0: replicas: {y},{x},{ctrl}. adding: {y}. removing: {ctrl}."]
            cancel = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                         "--reassignment-json-file", plan, "--cancel")
            # Cancelled; the throttles are removed as Kafka's --cancel does, except on
            # the paused broker, which cannot answer: named, exit 1.
            assert cancel.returncode == 1, cancel
            assert "Successfully cancelled partition reassignments for: rc-0" in cancel.stdout
            assert f"the throttles of broker {y} are not removed" in cancel.stderr, cancel.stderr
            assert _listed(cl, x) == []
        finally:
            cl.brokers[y].proc.send_signal(signal.SIGCONT)
        wait_for(lambda: _settled(cl, "rc", {0: [x, ctrl]}), 60,
                 lambda: f"the original replicas back:\n{cl.views()}")
        wait_for(lambda: _holders(cl, "rc", 0) == sorted([x, ctrl]), 30,
                 lambda: f"no copy left on broker {y}: {_holders(cl, 'rc', 0)}")
        verify = cli("reassign-partitions", "--bootstrap-server", cl.brokers[y].bootstrap,
                     "--reassignment-json-file", plan, "--verify")
        assert verify.returncode == 1
        assert (f"There is no active reassignment of partition rc-0, but replica set is {x},{ctrl} "
                f"rather than {y},{x}.") in verify.stdout

        # A topic whose reassignment cannot finish (its target paused) is not deleted
        # while it runs; cancelling it lets the deletion complete.
        cl.brokers[y].proc.send_signal(signal.SIGSTOP)
        try:
            run = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                      "--reassignment-json-file", plan, "--execute")
            assert run.returncode == 0, run.stderr
            gone = cli("topics", "delete", "--bootstrap-server", cl.brokers[x].bootstrap, "--topic", "rc",
                       "--timeout-ms", "2000")
            assert gone.returncode == 1 and "error 7 (RequestTimedOutError)" in gone.stderr, gone
            assert _znode(cl, "rc")["adding_replicas"] == {"0": [y]}  # still there, waiting
            cancel = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                         "--reassignment-json-file", plan, "--cancel", "--preserve-throttles")
            assert cancel.returncode == 0, cancel.stderr
            assert "Clearing" not in cancel.stdout
            wait_for(lambda: "rc" not in _topics_in_zk(cl), 30, "the deletion to complete")
        finally:
            cl.brokers[y].proc.send_signal(signal.SIGCONT)
        wait_for(lambda: _holders(cl, "rc", 0) == [], 30,
                 lambda: f"every copy deleted: {_holders(cl, 'rc', 0)}")


def _topics_in_zk(cl: Cluster) -> list[str]:
    zk = KazooClient(hosts=cl.zk.hosts)
    zk.start(10)
    try:
        return zk.get_children("/brokers/topics")
    finally:
        zk.stop()
        zk.close()


def test_the_command_refuses_a_bad_reassignment_file_before_asking_anyone(tmp_path: Path) -> None:
    """Kafka's file format, checked entry by entry: each mistake is named, exit 2, and
    no broker is asked (none listens on the port given)."""
    def run(doc: object) -> Any:
        f = tmp_path / "plan.json"
        f.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return cli("reassign-partitions", "--bootstrap-server", "127.0.0.1:1",
                   "--reassignment-json-file", str(f), "--execute")

    one = {"topic": "t", "partition": 0, "replicas": [1, 2]}
    for doc, said in (
            ("{not json", "not JSON"),
            ({"version": 1}, 'needs a non-empty "partitions" list'),
            ({"partitions": [{**one, "replicas": []}]}, 'needs "replicas"'),
            ({"partitions": [{**one, "partition": -1}]}, 'needs a "partition" number'),
            ({"partitions": [{**one, "log_dirs": ["d1", "any"]}]}, 'is "any" or the absolute path'),
            ({"partitions": [{**one, "log_dirs": [1, "any"]}]}, "(got 1)"),
            ({"partitions": [{**one, "log_dirs": ["any"]}]}, "one entry per replica"),
            ({"partitions": [one, one]}, "t-0 is named twice")):
        got = run(doc)
        assert got.returncode == 2 and said in got.stderr, (doc, got.stderr)
    got = cli("reassign-partitions", "--bootstrap-server", "127.0.0.1:1", "--verify")
    assert got.returncode == 2 and "need --reassignment-json-file" in got.stderr
    got = cli("reassign-partitions", "--bootstrap-server", "127.0.0.1:1", "--generate", "--topics", "t",
              "--broker-list", "1,1")
    assert got.returncode == 2 and "distinct broker ids" in got.stderr


def test_a_replica_moved_off_a_broker_that_was_down_is_deleted_when_it_returns(tmp_path: Path) -> None:
    """Broker y is killed; its partition moves to [x, controller] without it (the
    StopReplica for its copy has nowhere to go). When y starts again, the controller
    finds the copy among what y lists at /logkeeper/brokers/<y>/log_dirs and deletes it;
    the partition's own replicas keep every record."""
    with Cluster(tmp_path, dirs=1) as cl:
        ctrl = cl.controller()
        x, y = (b for b in cl.brokers if b != ctrl)
        create(cl, "rd", 1, min_isr=1, assignment=[[x, y]])
        c = RawClient(cl.brokers[x].port)
        try:
            for i in range(5):
                assert produce_raw(c, "rd", 0, [b"r%d" % i])[0] == 0
        finally:
            c.close()
        wait_for(lambda: _identical(cl, "rd", {0: [x, y]}), 30, "y caught up")
        cl.brokers[y].kill()
        wait_for(lambda: y not in cl.metadata(x)["brokers"], SESSION_MS / 1000 + 20, "y's death noticed")
        run = cli("reassign-partitions", "--bootstrap-server", cl.brokers[x].bootstrap,
                  "--reassignment-json-file", _plan(tmp_path, "rd", {0: [x, ctrl]}), "--execute")
        assert run.returncode == 0, run.stderr
        wait_for(lambda: _settled(cl, "rd", {0: [x, ctrl]}), 60, lambda: f"moved off y:\n{cl.views()}")
        assert _holders(cl, "rd", 0) == sorted([x, y, ctrl])  # y's copy is still on its disk
        cl.brokers[y].start()
        wait_for(lambda: _holders(cl, "rd", 0) == sorted([x, ctrl]), 30,
                 lambda: f"y's copy deleted once it is back: {_holders(cl, 'rd', 0)}")
        assert "holds a replica it is not assigned" in cl.brokers[cl.controller()].stderr()
        assert _identical(cl, "rd", {0: [x, ctrl]})
        assert [v for _, v in consume_all(cl, "rd", 1)[0]] == [b"r%d" % i for i in range(5)]


def test_a_standalone_broker_answers_reassignments_as_the_only_replica(tmp_path: Path) -> None:
    """Standalone, the broker is every partition's only replica: a reassignment to it
    alone is done already, any other broker is refused (39), a cancel finds nothing
    (85), nothing is ever listed."""
    from .daemon_helpers import running

    with running(tmp_path) as d:
        create_topic(d, "solo", 1)
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            tp = KTP("solo", 0)
            assert admin.alter_partition_reassignments({tp: [1]}) == {tp: None}
            assert admin.alter_partition_reassignments({tp: [1, 2]}) == \
                {tp: ke.InvalidReplicationAssignmentError}
            assert admin.alter_partition_reassignments({tp: None}) == {tp: ke.NoReassignmentInProgressError}
            assert admin.alter_partition_reassignments({KTP("solo", 3): [1]}) == \
                {KTP("solo", 3): ke.UnknownTopicOrPartitionError}
            assert admin.list_partition_reassignments() == {}
        finally:
            admin.close()
        listed = cli("reassign-partitions", "--bootstrap-server", d.bootstrap, "--list")
        assert listed.returncode == 0 and "No partition reassignments found." in listed.stdout


def _config_znode(cl: Cluster, path: str) -> dict[str, str]:
    zk = KazooClient(hosts=cl.zk.hosts)
    zk.start(10)
    try:
        return json.loads(zk.get(path)[0])["config"] if zk.exists(path) else {}
    finally:
        zk.stop()
        zk.close()


def test_a_throttled_reassignment_copies_at_the_rate_given_and_verify_removes_it(
        tmp_path: Path) -> None:
    """`--execute --throttle` (Kafka's replication throttles): partition 0, holding 6 MiB,
    moves from [1, 2] to [2, 3] at 512 KiB/s. The new replica on broker 3 copies at about
    that rate, so the move takes seconds where an unthrottled one takes well under one;
    the in-sync follower is not held back, so the acks=all producers keep going while
    it copies. --verify, once the move is done, removes the throttles from the brokers
    and the topic. (Rates measured over 3 windows of 1 s instead of Kafka's 11, so the
    first burst a new quota lets through is 2 s' worth, not 10.)"""
    rate = 512 * 1024
    extra = {"replication.quota.window.num": 3}
    with Cluster(tmp_path, dirs=1, extra=extra) as cl:
        create(cl, "rt", 1, min_isr=2, assignment=[[1, 2]])
        fill(cl.brokers[1].port, "rt", 0, 30, b"fill")  # 6 MiB
        loads = start_producers(cl, "rt", 1)
        want = {0: [2, 3]}
        plan = _plan(tmp_path, "rt", want)
        boot = cl.brokers[2].bootstrap
        try:
            wait_for(lambda: all(len(x.acked) > 200 for x in loads), 60, "load running")
            run = cli("reassign-partitions", "--bootstrap-server", boot,
                      "--reassignment-json-file", plan, "--execute", "--throttle", str(rate))
            assert run.returncode == 0, run.stderr
            started = time.monotonic()
            assert f"The inter-broker throttle limit was set to {rate} B/s" in run.stdout
            assert "You must run --verify periodically" in run.stdout
            # What Kafka's command writes: the sources as leader-throttled replicas, the
            # new replica as follower-throttled, the rate on every broker involved.
            assert _config_znode(cl, "/config/topics/rt") == {
                "min.insync.replicas": "2", "leader.replication.throttled.replicas": "0:1,0:2",
                "follower.replication.throttled.replicas": "0:3"}
            for b in (1, 2, 3):
                assert _config_znode(cl, f"/config/brokers/{b}") == {
                    "leader.replication.throttled.rate": str(rate),
                    "follower.replication.throttled.rate": str(rate)}
            # While broker 3 copies, the in-sync follower is not held back: acks go on.
            _more_acks(loads)
            assert _listed(cl, 2) == ["rt-0: replicas: 2,3,1. adding: 3. removing: 1."]
            assert (metric(cl.brokers[1], "kafka_server_leaderreplication_byte_rate") or 0) > 0
            assert (metric(cl.brokers[3], "kafka_server_followerreplication_byte_rate") or 0) > 0

            def verify() -> Any:
                return cli("reassign-partitions", "--bootstrap-server", boot,
                           "--reassignment-json-file", plan, "--verify")
            done = wait_for(lambda: (v := verify()).returncode == 0 and v, 120,
                            lambda: f"the throttled move to complete:\n{cl.views()}")
            took = time.monotonic() - started
            print(f"throttled move of 6 MiB at {rate} B/s: {took:.1f} s")
            # 6 MiB at 512 KiB/s, less the 2 s a new quota lets through and one fetch's
            # overshoot: about 7 s at the least. Unthrottled it is well under 1 s.
            assert took > 5, f"the throttled copy took {took:.1f} s"
            assert "Clearing broker-level throttles on brokers 1,2,3" in done.stdout, done.stdout
            assert "Clearing topic-level throttles on topic rt" in done.stdout
            assert _config_znode(cl, "/config/topics/rt") == {"min.insync.replicas": "2"}
            for b in (1, 2, 3):
                assert _config_znode(cl, f"/config/brokers/{b}") == {}
            described = cli("configs", "describe", "--bootstrap-server", boot, "--topic", "rt")
            assert "throttled" not in described.stdout, described.stdout
            wait_for(lambda: _settled(cl, "rt", want), 30, "metadata and znode on the new replicas")
            _more_acks(loads)
        finally:
            unanswered = [x.finish() for x in loads]
        assert_every_ack_read_once(cl, "rt", 1, loads, unanswered)
        wait_for(lambda: _identical(cl, "rt", want), 30, "new replicas byte-identical")


def test_each_side_of_a_throttle_holds_a_new_replica_back_alone(tmp_path: Path) -> None:
    """The two lists work on their own, set by hand as with kafka-configs.sh: partition 0
    is throttled only on its leader (broker 1 sends it slowly), partition 1 only on the
    new follower (broker 3 fetches it slowly), each at 512 KiB/s. Both get a replica on
    broker 3 at once; each copy of 4 MiB takes seconds, not a fraction of one, and each
    ends complete."""
    rate = 512 * 1024
    # Fetches of 256 KiB: what one passes beyond the rate (the check comes before it) is
    # small beside the 4 MiB.
    extra = {"replication.quota.window.num": 3, "replica.fetch.max.bytes": 256 * 1024}
    with Cluster(tmp_path, dirs=1, extra=extra) as cl:
        create(cl, "rs", 2, min_isr=1, assignment=[[1, 2], [1, 2]])
        for p in (0, 1):
            fill(cl.brokers[1].port, "rs", p, 20, b"s%d" % p)  # 4 MiB each
        boot = cl.brokers[1].bootstrap

        def configs(*args: str) -> None:
            got = cli("configs", "alter", "--bootstrap-server", boot, *args)
            assert got.returncode == 0, got.stderr

        configs("--topic", "rs", "--add-config", "leader.replication.throttled.replicas=[0:1,0:2],"
                "follower.replication.throttled.replicas=[1:3]")
        configs("--broker", "1", "--add-config", f"leader.replication.throttled.rate={rate}")
        configs("--broker", "3", "--add-config", f"follower.replication.throttled.rate={rate}")
        admin = _admin(cl, 1)
        try:
            started = time.monotonic()
            assert admin.alter_partition_reassignments({KTP("rs", 0): [1, 2, 3], KTP("rs", 1): [1, 2, 3]}) \
                == {KTP("rs", 0): None, KTP("rs", 1): None}
            done: dict[int, float] = {}

            def both_copied() -> bool:
                isr = {p: v[3] for (t, p), v in cl.metadata(1, ["rs"])["partitions"].items()}
                for p in (0, 1):
                    if p not in done and 3 in isr.get(p, []):
                        done[p] = time.monotonic() - started
                return len(done) == 2
            wait_for(both_copied, 90, lambda: f"both copies on broker 3: {done}\n{cl.views()}")
        finally:
            admin.close()
        print(f"4 MiB to a new replica at {rate} B/s: leader-throttled {done[0]:.1f} s, "
              f"follower-throttled {done[1]:.1f} s")
        # 4 MiB at 512 KiB/s, less the 2 s' burst of a new quota and a fetch or two: over 4 s.
        assert done[0] > 3 and done[1] > 3, done
        wait_for(lambda: _identical(cl, "rs", {0: [1, 2, 3], 1: [1, 2, 3]}), 30, "identical replicas")

        # Taken off by hand, as kafka-configs.sh --delete-config: nothing is throttled.
        configs("--topic", "rs", "--delete-config", "leader.replication.throttled.replicas,"
                "follower.replication.throttled.replicas")
        shown = cli("configs", "describe", "--bootstrap-server", boot, "--topic", "rs")
        assert "throttled" not in shown.stdout, shown.stdout


def _dirs_holding(cl: Cluster, broker: int, topic: str, partition: int) -> list[str]:
    """The log dirs of `broker` with a directory of the partition, its copies included."""
    return sorted(str(ld) for ld in cl.brokers[broker].log_dirs
                  for d in ld.glob(f"{topic}-{partition}*")
                  if d.name == f"{topic}-{partition}" or d.name.endswith("-future"))


def test_log_dirs_in_the_reassignment_file_put_each_replica_on_the_disk_named(
        tmp_path: Path) -> None:
    """Kafka's `log_dirs` in a reassignment file (KIP-113): ld-0 moves from [1, 2] to
    [1, 3] with broker 1's replica to its other disk and broker 3's new replica on its
    second disk; ld-1 keeps its brokers and only broker 1's replica changes disk.
    --execute starts the reassignment, then AlterReplicaLogDirs to each broker named,
    retried until broker 3 holds ld-0: broker 3 remembered the dir and created the
    replica there (it never had it elsewhere: no move on broker 3), while broker 1's
    replicas were moved. --replica-alter-log-dirs-throttle sets the rate on the brokers
    with moves, --verify says each replica's move completed and then removes it.

    Then a move held back by a low rate (64 KiB/s, 2 MiB to copy) is listed by --verify
    as still in progress and --cancel keeps the replica where it is: the copy goes and
    --verify says the replica is not being moved. A dir that is not one of the broker's
    fails the command with Kafka's error and changes nothing."""
    extra = {"alter.log.dirs.replication.quota.window.num": 3}
    with Cluster(tmp_path, dirs=2, extra=extra) as cl:
        create(cl, "ld", 2, min_isr=1, assignment=[[1, 2], [2, 1]])
        fill(cl.brokers[1].port, "ld", 0, 10, b"ld0")  # 2 MiB
        fill(cl.brokers[2].port, "ld", 1, 5, b"ld1")
        d1, d3 = cl.brokers[1].log_dirs, cl.brokers[3].log_dirs
        [ld0_on_1] = _dirs_holding(cl, 1, "ld", 0)
        [ld1_on_1] = _dirs_holding(cl, 1, "ld", 1)
        to_1 = {p: next(str(d) for d in d1 if str(d) != now)
                for p, now in ((0, ld0_on_1), (1, ld1_on_1))}
        plan = tmp_path / "dirs.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "ld", "partition": 0, "replicas": [1, 3], "log_dirs": [to_1[0], str(d3[1])]},
            {"topic": "ld", "partition": 1, "replicas": [2, 1], "log_dirs": ["any", to_1[1]]}]}))
        boot = cl.brokers[2].bootstrap
        run = cli("reassign-partitions", "--bootstrap-server", boot, "--reassignment-json-file",
                  str(plan), "--execute", "--replica-alter-log-dirs-throttle", "50000000")
        assert run.returncode == 0, run.stderr
        assert "The replica-alter-dir throttle limit was set to 50000000 B/s" in run.stdout
        for b, d, tp in ((1, to_1[0], "ld-0"), (1, to_1[1], "ld-1"), (3, str(d3[1]), "ld-0")):
            assert (f"Successfully started moving log directory to {d} for replica {tp} with "
                    f"broker {b} ") in run.stdout, run.stdout
        for b in (1, 3):
            assert _config_znode(cl, f"/config/brokers/{b}") == {
                "replica.alter.log.dirs.io.max.bytes.per.second": "50000000"}

        def verified() -> bool:
            v = cli("reassign-partitions", "--bootstrap-server", boot,
                    "--reassignment-json-file", str(plan), "--verify")
            return v.returncode == 0 and all(
                f"Reassignment of replica {r} completed successfully." in v.stdout
                for r in ("ld-0-1", "ld-0-3", "ld-1-1"))
        wait_for(verified, 90, lambda: f"--verify to say done:\n{cl.views()}")
        assert _dirs_holding(cl, 1, "ld", 0) == [to_1[0]]
        assert _dirs_holding(cl, 1, "ld", 1) == [to_1[1]]
        assert _dirs_holding(cl, 3, "ld", 0) == [str(d3[1])]
        assert "moving ld-0 from log dir" not in cl.brokers[3].stderr()  # created in place
        assert "moving ld-0 from log dir" in cl.brokers[1].stderr()
        for b in (1, 3):
            assert _config_znode(cl, f"/config/brokers/{b}") == {}  # --verify removed it
        wait_for(lambda: _settled(cl, "ld", {0: [1, 3], 1: [2, 1]}), 30, "replicas settled")
        wait_for(lambda: _identical(cl, "ld", {0: [1, 3], 1: [2, 1]}), 30, "replicas identical")

        # A slow move, cancelled: broker 3's ld-0 stays on its second disk.
        slow = tmp_path / "slow.json"
        slow.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "ld", "partition": 0, "replicas": [1, 3], "log_dirs": ["any", str(d3[0])]}]}))
        run = cli("reassign-partitions", "--bootstrap-server", boot, "--reassignment-json-file",
                  str(slow), "--execute", "--replica-alter-log-dirs-throttle", str(64 * 1024))
        assert run.returncode == 0, run.stderr
        assert (f"Successfully started moving log directory to {d3[0]} for replica ld-0 with "
                "broker 3 ") in run.stdout, run.stdout
        v = cli("reassign-partitions", "--bootstrap-server", boot, "--reassignment-json-file",
                str(slow), "--verify")
        assert v.returncode == 1 and "Reassignment of replica ld-0-3 is still in progress." in v.stdout, v
        assert _config_znode(cl, "/config/brokers/3") != {}  # a move under way: kept
        assert _dirs_holding(cl, 3, "ld", 0) == sorted([str(d3[0]), str(d3[1])])
        cancel = cli("reassign-partitions", "--bootstrap-server", boot, "--reassignment-json-file",
                     str(slow), "--cancel")
        assert cancel.returncode == 0, cancel.stderr
        assert (f"Successfully started moving log directory to {d3[1]} for replica ld-0 with "
                "broker 3 ") in cancel.stdout, cancel.stdout
        assert "Clearing broker-level throttles on brokers 1,2,3" in cancel.stdout
        assert _config_znode(cl, "/config/brokers/3") == {}  # --cancel removed it
        wait_for(lambda: _dirs_holding(cl, 3, "ld", 0) == [str(d3[1])], 30, "the copy removed")
        v = cli("reassign-partitions", "--bootstrap-server", boot, "--reassignment-json-file",
                str(slow), "--verify")
        assert v.returncode == 1, v
        assert (f"Partition ld-0 on broker 3 is not being moved from log dir {d3[1]} to "
                f"{d3[0]}.") in v.stdout, v.stdout

        # A dir the broker does not have: Kafka's error, exit 1, nothing moved.
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "ld", "partition": 1, "replicas": [2, 1], "log_dirs": ["/no/such/dir", "any"]}]}))
        run = cli("reassign-partitions", "--bootstrap-server", boot, "--reassignment-json-file",
                  str(bad), "--execute")
        assert run.returncode == 1, run
        assert "Failed to alter dir for ld-1-2: /no/such/dir is not a log dir of broker 2" in run.stderr
        assert "Successfully started" not in run.stdout, run.stdout  # checked before anything
        assert len(_dirs_holding(cl, 2, "ld", 1)) == 1
        assert _identical(cl, "ld", {0: [1, 3], 1: [2, 1]})
